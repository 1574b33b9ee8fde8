package bench

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuf is a bytes.Buffer the meter's goroutine writes while the test
// reads.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestMeter_LinePerPhase(t *testing.T) {
	var w lockedBuf
	m := newMeter(&w)
	m.phase("e end to end [relay]")
	m.track("published at L1 -> completed at L1", "events completed", 100, func() int64 { return 40 })
	m.phase("F fleet [relay]")
	m.waiting("links cut", time.Minute)
	m.end()
	m.close()
	out := w.String()
	for _, want := range []string{
		"bench: e end to end [relay]: published at L1 -> completed at L1 0/100 events completed",
		"bench: e end to end [relay]: done in 0s\n",
		"bench: F fleet [relay]: links cut 0s of 1m0s, ETA 1m0s",
		"bench: F fleet [relay]: done in 0s\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in %q", want, out)
		}
	}
	// Nothing is drawn once the meter is closed.
	m.phase("r edge process RSS")
	if w.String() != out {
		t.Errorf("drawn after close: %q", strings.TrimPrefix(w.String(), out))
	}
}

func TestMeterLine_RateAndTimeLeft(t *testing.T) {
	t0 := time.Now()
	c := &meterLine{phase: "f drain [sourcing]", start: t0.Add(-time.Minute), from: t0, step: "receipts to L1",
		unit: "events completed", total: 20000, count: func() int64 { return 0 }, last: 5000}
	got := c.text(t0.Add(10 * time.Second))
	want := "bench: f drain [sourcing]: receipts to L1 5000/20000 events completed, 500/s, ETA 30s [phase 1m10s]"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// Text written to Out erases the progress line first; Out gets its bytes
// unchanged.
func TestMeter_OutErasesTheLine(t *testing.T) {
	var prog lockedBuf
	var out bytes.Buffer
	m := newMeter(&prog)
	defer m.close()
	m.phase("d sink runner")
	w := m.out(&out)
	before := prog.String()
	w.Write([]byte("bench: preloaded\n"))
	if out.String() != "bench: preloaded\n" {
		t.Errorf("out %q", out.String())
	}
	if got := strings.TrimPrefix(prog.String(), before); got != "\r\033[K" {
		t.Errorf("progress after a write to out: %q, want the line erased", got)
	}
}

// A nil meter (no Progress) does nothing and hands Out back as it is.
func TestMeter_NilDrawsNothing(t *testing.T) {
	m := newMeter(nil)
	m.phase("k receipt signing")
	m.track("x", "events", 1, nil)
	m.waiting("y", time.Second)
	m.end()
	m.close()
	var out bytes.Buffer
	if m.out(&out) != &out {
		t.Error("out wrapped without progress")
	}
}

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
