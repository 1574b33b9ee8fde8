//go:build linux

package bench

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

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
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var prog lockedBuf
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := Options{Phases: []string{"l"}, Cuts: 1, CutFor: 10 * time.Minute, Rate: 10,
		Unsigned: true, Insecure: true, Progress: &prog}
	done := make(chan error, 1)
	go func() { _, err := Leafline(ctx, o); done <- err }()
	check.For(t, time.Minute, 50*time.Millisecond, func() error {
		select {
		case err := <-done:
			t.Fatalf("Leafline returned before the cut: %v\n%s", err, prog.String())
		default:
		}
		if !strings.Contains(prog.String(), "cut for 10m0s") {
			return errors.New("not in the cut yet")
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Leafline returned %v, want context.Canceled", err)
	}
	if !strings.Contains(prog.String(), "bench: l link restore [sourcing]: ended after") {
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
