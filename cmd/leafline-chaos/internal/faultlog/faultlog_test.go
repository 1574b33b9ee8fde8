package faultlog

import (
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A log read back from its file gives the same tallies and findings.
func TestReplay(t *testing.T) {
	dir := t.TempDir()
	var shown strings.Builder
	l := New(&shown, false, filepath.Join(dir, "chaos.log"))
	l.Fault("kill", "edge1", 2*time.Second)
	l.FaultNote("linkcut", "edge1-hub", 3*time.Minute, "long")
	l.FaultNote("powercut", "edge2", time.Second, "torn")
	l.Fault("kill", "hub", 0)
	l.Finding("full disk at %s went unreported", "edge1")
	l.Info("fault phase over: healing")
	l.Debug("not shown without verbose")
	l.Close()
	if !strings.Contains(shown.String(), "FINDING: full disk at edge1") || strings.Contains(shown.String(), "not shown") {
		t.Errorf("shown:\n%s", shown.String())
	}

	r := New(io.Discard, false, filepath.Join(dir, "recheck.log"))
	defer r.Close()
	r.Replay(filepath.Join(dir, "chaos.log"), []string{"kill", "linkcut", "powercut", "disk"})
	for _, c := range []struct {
		kinds []string
		want  int
	}{{nil, 4}, {[]string{"kill"}, 2}, {[]string{"linkcut", "powercut"}, 2}, {[]string{"disk"}, 0}} {
		if got := r.Count(c.kinds...); got != c.want {
			t.Errorf("Count(%q) = %d, want %d", c.kinds, got, c.want)
		}
	}
	if r.Notes("long") != 1 || r.Notes("torn") != 1 {
		t.Errorf("notes: long %d torn %d, want 1 and 1", r.Notes("long"), r.Notes("torn"))
	}
	if got := r.Findings(); !slices.Equal(got, []string{"full disk at edge1 went unreported"}) {
		t.Errorf("findings %q", got)
	}
	var table strings.Builder
	r.Table(&table)
	if !strings.Contains(table.String(), "edge1-hub") || !strings.Contains(table.String(), "long=1") {
		t.Errorf("table:\n%s", table.String())
	}
}
