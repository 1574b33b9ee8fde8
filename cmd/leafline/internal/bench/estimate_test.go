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

// park and replace take longer with more events; F takes longer with a
// parked run than without one (a fleet of one edge has none).
func TestEstimate_ParkReplaceAndParkedFleet(t *testing.T) {
	for _, c := range []struct {
		name        string
		small, more Options
	}{
		{"park", Options{Phases: []string{"park"}, ParkEvents: 2000}, Options{Phases: []string{"park"}}},
		{"replace", Options{Phases: []string{"replace"}, ReplaceBefore: 100, ReplaceAfter: 100}, Options{Phases: []string{"replace"}}},
		{"F", Options{Phases: []string{"F"}, FleetEdges: 1, FleetEvents: 2000}, Options{Phases: []string{"F"}, FleetEdges: 2, FleetEvents: 1000}},
	} {
		if s, m := c.small.Estimate(), c.more.Estimate(); s >= m {
			t.Errorf("%s: estimates %v and %v: want increasing", c.name, s, m)
		}
	}
}
