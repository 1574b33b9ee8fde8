package runner

import (
	"math"
	"testing"
	"time"

	"github.com/leafline/leafline/topology"
)

func TestBackoff_Modes(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		mode string
		n    uint64
		want time.Duration
	}{
		{"fixed", 1, 100 * ms},
		{"fixed", 50, 100 * ms},
		{"linear", 1, 100 * ms},
		{"linear", 3, 300 * ms},
		{"linear", 1000, 5000 * ms},
		{"linear", math.MaxUint64, 5000 * ms},
		{"exponential", 1, 100 * ms},
		{"exponential", 2, 200 * ms},
		{"exponential", 4, 800 * ms},
		{"exponential", 7, 5000 * ms},
		{"exponential", 64, 5000 * ms},
		{"exponential", math.MaxUint64, 5000 * ms},
		{"exponential", 0, 100 * ms},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			b := Backoff(topology.RetryConfig{Mode: tc.mode, Jitter: "none", BackoffMS: 100, BackoffMaxMS: 5000})
			if got := b(tc.n); got != tc.want {
				t.Fatalf("%s n=%d: got %s, want %s", tc.mode, tc.n, got, tc.want)
			}
		})
	}
}

func TestBackoff_JitterStaysInRange(t *testing.T) {
	for _, jitter := range []string{"full", "equal"} {
		b := Backoff(topology.RetryConfig{Mode: "exponential", Jitter: jitter, BackoffMS: 100, BackoffMaxMS: 1000})
		lo := time.Duration(0)
		if jitter == "equal" {
			lo = 500 * time.Millisecond
		}
		for i := 0; i < 1000; i++ {
			if d := b(10); d < lo || d > time.Second {
				t.Fatalf("%s: %s outside [%s, 1s]", jitter, d, lo)
			}
		}
	}
}
