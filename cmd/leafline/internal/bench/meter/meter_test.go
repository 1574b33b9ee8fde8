package meter

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/logx/logxtest"
)

func TestMeter_LinePerPhase(t *testing.T) {
	var w logxtest.Buffer
	m := New(&w)
	m.Phase("e end to end [relay]")
	m.Track("published at L1 -> completed at L1", "events completed", 100, func() int64 { return 40 })
	m.Phase("F fleet [relay]")
	m.Waiting("links cut", time.Minute)
	m.End()
	m.Close()
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
	m.Phase("r edge process RSS")
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
	var prog logxtest.Buffer
	var out bytes.Buffer
	m := New(&prog)
	defer m.Close()
	m.Phase("d sink runner")
	w := m.Out(&out)
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
	m := New(nil)
	m.Phase("k receipt signing")
	m.Track("x", "events", 1, nil)
	m.Waiting("y", time.Second)
	m.End()
	m.Close()
	var out bytes.Buffer
	if m.Out(&out) != &out {
		t.Error("out wrapped without progress")
	}
}
