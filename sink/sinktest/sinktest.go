// Package sinktest is the conformance suite every leafline sink passes: a
// real target behind the sink (a server, a process, a database), driven
// through the small interfaces below, and the cases of the sink contract
// (see package sink) run against it.
//
// A sink's test calls Run with its Target. A case that needs a capability
// the target does not have (Refuser, Outage, Delayer, Garbler) is skipped
// with a message naming it.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leafline/leafline/sink"
)

// Target is a real target of one sink.
type Target interface {
	// NewSink returns a sink that writes to the target. Its per-write
	// timeout should be short (about 2s), so that the slow-target case
	// stays short; the suite closes the sink when it is an io.Closer.
	NewSink(t *testing.T) sink.Sink
	// Stored reports how many records the target holds for eventID. An
	// idempotent target holds 0 or 1.
	Stored(t *testing.T, eventID string) int
}

// Refuser is a target that can be made to refuse an event: permanently (a
// validation error: the sink must return a Permanent error), or
// temporarily for the next times attempts (the sink must return a
// temporary error).
type Refuser interface {
	Refuse(t *testing.T, eventID string, permanent bool, times int)
}

// Outage is a target that can be made unreachable and reachable again.
type Outage interface {
	SetDown(t *testing.T, down bool)
}

// Delayer is a target that can be made to take d for each event or batch.
type Delayer interface {
	SetDelay(t *testing.T, d time.Duration)
}

// Garbler is a target whose answers can be made malformed ("malformed")
// or oversize ("oversize"), or normal again (""). The sink must take such
// an answer as a temporary failure: it cannot tell what was done.
type Garbler interface {
	Garble(t *testing.T, how string)
}

// Run runs the conformance cases against target.
func Run(t *testing.T, target Target) {
	t.Run("Redelivery", func(t *testing.T) { testRedelivery(t, target) })
	t.Run("EmptyBatch", func(t *testing.T) { testEmpty(t, target) })
	t.Run("MixedResults", func(t *testing.T) { testMixed(t, target) })
	t.Run("TemporaryThenSuccess", func(t *testing.T) { testTemporaryThenSuccess(t, target) })
	t.Run("TargetDownThenBack", func(t *testing.T) { testDown(t, target) })
	t.Run("SlowTarget", func(t *testing.T) { testSlow(t, target) })
	t.Run("Cancelled", func(t *testing.T) { testCancelled(t, target) })
	t.Run("MalformedAnswer", func(t *testing.T) { testGarbled(t, target, "malformed") })
	t.Run("OversizeAnswer", func(t *testing.T) { testGarbled(t, target, "oversize") })
}

// Events returns n events with fresh time-ordered ids, JSON payloads and
// subjects under events.test.
func Events(n int) []sink.Event {
	evs := make([]sink.Event, n)
	for i := range evs {
		id := uuid.Must(uuid.NewV7()).String()
		evs[i] = sink.Event{
			ID:           id,
			Subject:      fmt.Sprintf("events.test.%d", i),
			OriginStream: "L1A",
			Data:         []byte(fmt.Sprintf(`{"n":%d,"id":%q}`, i, id)),
			StreamSeq:    uint64(i + 1),
		}
	}
	return evs
}

// NewSink is target's sink, closed when the test ends.
func NewSink(t *testing.T, target Target) sink.Sink {
	t.Helper()
	s := target.NewSink(t)
	if c, ok := s.(io.Closer); ok {
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("close sink: %v", err)
			}
		})
	}
	return s
}

// write calls Write with a bound and checks the result's shape.
func write(t *testing.T, s sink.Sink, evs []sink.Event) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := s.Write(ctx, evs)
	if len(errs) != len(evs) {
		t.Fatalf("Write returned %d results for %d events", len(errs), len(evs))
	}
	return errs
}

func wantOK(t *testing.T, errs []error, evs []sink.Event) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Errorf("event %d (%s): want success, got %v", i, evs[i].ID, err)
		}
	}
}

func wantTemporary(t *testing.T, err error, what string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: want a temporary failure, got success", what)
	case sink.IsPermanent(err):
		t.Errorf("%s: want a temporary failure, got a permanent one: %v", what, err)
	}
}

// WantStored fails t unless target holds n records of each of evs.
func WantStored(t *testing.T, target Target, evs []sink.Event, n int) {
	t.Helper()
	for _, ev := range evs {
		if got := target.Stored(t, ev.ID); got != n {
			t.Errorf("event %s: target holds %d records, want %d", ev.ID, got, n)
		}
	}
}

func testRedelivery(t *testing.T, target Target) {
	s := NewSink(t, target)
	evs := Events(5)
	wantOK(t, write(t, s, evs), evs)
	// A redelivery: the same batch, and a batch that overlaps it.
	wantOK(t, write(t, s, evs), evs)
	more := append(Events(2), evs[1], evs[3])
	wantOK(t, write(t, s, more), more)
	WantStored(t, target, evs, 1)
	WantStored(t, target, more, 1)
	// A new sink on the same target (a restarted box) absorbs it too.
	s2 := NewSink(t, target)
	wantOK(t, write(t, s2, evs[:2]), evs[:2])
	WantStored(t, target, evs, 1)
}

func testEmpty(t *testing.T, target Target) {
	s := NewSink(t, target)
	if errs := s.Write(context.Background(), nil); len(errs) != 0 {
		t.Fatalf("Write(nil) returned %d results", len(errs))
	}
}

func testMixed(t *testing.T, target Target) {
	r, ok := target.(Refuser)
	if !ok {
		t.Skip("the target cannot be made to refuse an event (no Refuser)")
	}
	s := NewSink(t, target)
	evs := Events(6)
	r.Refuse(t, evs[1].ID, true, 0)
	r.Refuse(t, evs[3].ID, false, 1)
	errs := write(t, s, evs)
	for i, err := range errs {
		switch i {
		case 1:
			if !sink.IsPermanent(err) {
				t.Errorf("refused event: want a permanent failure, got %v", err)
			}
		case 3:
			wantTemporary(t, err, "event refused once")
		default:
			if err != nil {
				t.Errorf("event %d: want success beside the refused ones, got %v", i, err)
			}
		}
	}
	// The runner retries the temporary one alone.
	wantOK(t, write(t, s, evs[3:4]), evs[3:4])
	WantStored(t, target, []sink.Event{evs[0], evs[2], evs[3], evs[4], evs[5]}, 1)
	WantStored(t, target, evs[1:2], 0)
}

func testTemporaryThenSuccess(t *testing.T, target Target) {
	r, ok := target.(Refuser)
	if !ok {
		t.Skip("the target cannot be made to refuse an event (no Refuser)")
	}
	s := NewSink(t, target)
	evs := Events(3)
	r.Refuse(t, evs[0].ID, false, 2)
	for attempt := 1; attempt <= 2; attempt++ {
		errs := write(t, s, evs[:1])
		wantTemporary(t, errs[0], fmt.Sprintf("attempt %d", attempt))
	}
	wantOK(t, write(t, s, evs), evs)
	WantStored(t, target, evs, 1)
}

func testDown(t *testing.T, target Target) {
	o, ok := target.(Outage)
	if !ok {
		t.Skip("the target cannot be taken down (no Outage)")
	}
	s := NewSink(t, target)
	evs := Events(4)
	wantOK(t, write(t, s, evs[:1]), evs[:1])
	o.SetDown(t, true)
	down := true
	t.Cleanup(func() {
		if down {
			o.SetDown(t, false)
		}
	})
	start := time.Now()
	errs := write(t, s, evs[1:])
	for i, err := range errs {
		wantTemporary(t, err, fmt.Sprintf("event %d while the target is down", i+1))
	}
	t.Logf("a batch to a target that is down failed in %v", time.Since(start))
	o.SetDown(t, false)
	down = false
	wantOK(t, write(t, s, evs), evs)
	WantStored(t, target, evs, 1)
}

func testSlow(t *testing.T, target Target) {
	d, ok := target.(Delayer)
	if !ok {
		t.Skip("the target cannot be slowed (no Delayer)")
	}
	s := NewSink(t, target)
	evs := Events(3)
	// Slower than any sink's short test timeout: a temporary failure,
	// whatever the target did meanwhile.
	d.SetDelay(t, 4*time.Second)
	errs := write(t, s, evs)
	for i, err := range errs {
		wantTemporary(t, err, fmt.Sprintf("event %d past the timeout", i))
	}
	// Slow but within the timeout: success.
	d.SetDelay(t, 200*time.Millisecond)
	wantOK(t, write(t, s, evs), evs)
	d.SetDelay(t, 0)
	WantStored(t, target, evs, 1)
}

func testCancelled(t *testing.T, target Target) {
	s := NewSink(t, target)
	evs := Events(3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan []error, 1)
	go func() { done <- s.Write(ctx, evs) }()
	select {
	case errs := <-done:
		if len(errs) != len(evs) {
			t.Fatalf("Write returned %d results for %d events", len(errs), len(evs))
		}
		for i, err := range errs {
			// A sink may have finished an event before it saw ctx; what
			// it must not do is call a failure permanent.
			if err != nil && sink.IsPermanent(err) {
				t.Errorf("event %d: a cancelled write is not a permanent failure: %v", i, err)
			}
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, sink.ErrUnavailable) {
				t.Logf("event %d: cancelled write failed with %v", i, err)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Write with a cancelled context did not return within 10s")
	}
}

func testGarbled(t *testing.T, target Target, how string) {
	g, ok := target.(Garbler)
	if !ok {
		t.Skipf("the target's answers cannot be made %s (no Garbler)", how)
	}
	s := NewSink(t, target)
	evs := Events(3)
	g.Garble(t, how)
	errs := write(t, s, evs)
	for i, err := range errs {
		wantTemporary(t, err, fmt.Sprintf("event %d with a %s answer", i, how))
	}
	g.Garble(t, "")
	wantOK(t, write(t, s, evs), evs)
	WantStored(t, target, evs, 1)
}
