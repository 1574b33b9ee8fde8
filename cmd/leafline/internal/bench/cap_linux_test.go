//go:build linux

package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The cap phase at a tiny size prints its figures on the final line; the
// rate itself is measured by the command on a quiet machine, not here.
func TestLeafline_CapPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers twice; skipped with -short")
	}
	var out strings.Builder
	figs, err := Leafline(context.Background(), Options{Phases: []string{"cap"}, CapWindow: 2 * time.Second,
		Unsigned: true, Insecure: true, Dir: t.TempDir(), Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := map[string]float64{}
	for _, f := range figs {
		got[f.Name] = f.Value
	}
	for _, name := range []string{"cap_down_bytes_per_s", "cap_up_bytes_per_s"} {
		if got[name] <= 0 {
			t.Errorf("%s missing or zero:\n%s", name, out.String())
		}
	}
	if _, ok := got["cap_error_pct"]; !ok {
		t.Errorf("cap_error_pct missing:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}

// A run stopped in cap, with its edge link cut and its backlogs building,
// stops like any other.
func TestLeafline_StoppedInCap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three servers; skipped with -short")
	}
	stopWhen(t, Options{Phases: []string{"cap"}, CapWindow: 5 * time.Second},
		"events backlog at the hub", "bench: cap link bandwidth cap [relay]: ended after")
}
