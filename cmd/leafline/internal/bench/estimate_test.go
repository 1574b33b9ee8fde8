package bench

import (
	"strings"
	"testing"
	"time"
)

func TestEstimate_GrowsWithSizes(t *testing.T) {
	small := Options{Phases: []string{"e", "f", "l", "F"}}
	full := Options{Phases: []string{"e", "f", "l", "F"}, E2E: 50_000, Drain: 100_000, FleetCut: 2 * time.Minute}
	both := full
	both.Transports = []string{"sourcing", "relay"}
	s, f, b := small.Estimate(), full.Estimate(), both.Estimate()
	if !(s < f && f < b) {
		t.Errorf("estimates %v (defaults) %v (full) %v (full, two transports): want increasing", s, f, b)
	}
	if line := small.estimateLine(); !strings.HasPrefix(line, "bench: 4 phases, transports sourcing, about ") || !strings.HasSuffix(line, "(an estimate)") {
		t.Errorf("line %q", line)
	}
}
