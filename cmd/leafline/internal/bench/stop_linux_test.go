//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/logx/logxtest"

	"github.com/leafline/leafline/internal/check"
)

// The stop Leafline promises after Ctrl-C or SIGTERM (within 5 s) is the
// sum of its stop bounds.
func TestLeafline_StopWithin5s(t *testing.T) {
	if d := stopGrace + stopCleanup + stopRemove; d >= 5*time.Second {
		t.Fatalf("stopGrace + stopCleanup + stopRemove = %v, want under 5s", d)
	}
}

// A run stopped inside a long link cut (phase l, one cut of 10 minutes,
// tiny sizes) returns the context's error and removes its temp dir.
func TestLeafline_StoppedInACut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers; skipped with -short")
	}
	stopWhen(t, Options{Phases: []string{"l"}, Cuts: 1, CutFor: 10 * time.Minute, Rate: 10},
		"cut for 10m0s", "bench: l link restore [sourcing]: ended after")
}

// stopWhen runs Leafline with o (unsigned receipts, plain TCP links) and
// stops it once its progress shows shown; then it must return the
// context's error, end its phase's line with ended (the phase's
// "bench: <phase>: ended after"), and leave nothing in its temp dir.
func stopWhen(t *testing.T, o Options, shown, ended string) {
	t.Helper()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var prog logxtest.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.Unsigned, o.Insecure, o.Progress = true, true, &prog
	done := make(chan error, 1)
	go func() { _, err := Leafline(ctx, o); done <- err }()
	check.For(t, 2*time.Minute, 50*time.Millisecond, func() error {
		select {
		case err := <-done:
			t.Fatalf("Leafline returned before %q: %v\n%s", shown, err, prog.String())
		default:
		}
		if !strings.Contains(prog.String(), shown) {
			return fmt.Errorf("progress does not show %q yet", shown)
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Leafline returned %v, want context.Canceled", err)
	}
	if !strings.Contains(prog.String(), ended) {
		t.Errorf("progress does not end the stopped phase's line: %q", prog.String())
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("the run left %s in its temp dir", e.Name())
	}
}
