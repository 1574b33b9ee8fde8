//go:build unix

package sink_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/topology"
)

// openCounted opens x's sink as a box does (sink.Open), counting into c.
func (x *execTarget) openCounted(t *testing.T, c *crashCounts) sink.Sink {
	t.Helper()
	cfg := x.config()
	o, err := sink.Open(topology.SinkConfig{Type: "exec", Exec: &cfg}, sink.Deps{Log: x.log, Count: c.counters()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { o.Close() })
	return o.Sink
}

// writeUntilSettled writes evs, then again the ones that failed
// temporarily, as the runner's redeliveries do, until none does or 20s
// pass. It returns each event's last result.
func writeUntilSettled(t *testing.T, s sink.Sink, evs []sink.Event) map[string]error {
	t.Helper()
	last := make(map[string]error, len(evs))
	pending := evs
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		errs := s.Write(ctx, pending)
		var again []sink.Event
		for i, err := range errs {
			last[pending[i].ID] = err
			if err != nil && !sink.IsPermanent(err) {
				again = append(again, pending[i])
			}
		}
		pending = again
		if len(pending) > 0 {
			return fmt.Errorf("%d events still fail temporarily, the first with %v", len(pending), last[pending[0].ID])
		}
		return nil
	})
	return last
}

// A worker that exits now and then, after answering events, is started
// again at once, whatever RestartBackoff says, and its unanswered events
// go to the next one: every event is done, and none is taken for a poison
// event.
func TestExecSink_CrashingWorkerRestartsAtOnce(t *testing.T) {
	x := newExecTarget(t)
	var logs execLogBuffer
	x.log = logs.logger()
	x.cfg = func(c *topology.ExecSinkConfig) { c.RestartBackoff = topology.Duration(time.Minute) }
	x.set(t, "crash-every", "7")
	var counts crashCounts
	s := x.openCounted(t, &counts)
	evs := sinktest.Events(40)
	start := time.Now()
	errs := execWrite(t, s, evs)
	if err := execAllOK(errs); err != nil {
		t.Fatalf("after %v: %v\n%s", time.Since(start), err, logs.String())
	}
	for _, ev := range evs {
		if x.Stored(t, ev.ID) != 1 {
			t.Errorf("event %s not stored", ev.ID)
		}
	}
	// Each worker answers 6 events: 40 events take at least 6 restarts.
	if n := counts.restarts.Load(); n < 6 {
		t.Errorf("%d worker restarts counted, want at least 6", n)
	}
	if c, r := counts.crashes.Load(), counts.restarts.Load(); c < r {
		t.Errorf("%d crashes counted for %d restarts", c, r)
	}
	for _, l := range logs.lines("restarting worker") {
		if !strings.Contains(l, "restart_in=0s") {
			t.Errorf("a worker that had answered events was not restarted at once: %s", l)
		}
	}
}

// An event the worker dies on every time is a poison event once it was
// in flight at PoisonAfter (3) crashes in a row: it fails permanently with
// ErrWorkerCrash, sent no fourth time, and the events around it are done.
// Redelivered alone, it is found all the same: an event the worker
// answered before is sent again to confirm the last crash.
func TestExecSink_PoisonEvent(t *testing.T) {
	x := newExecTarget(t)
	var logs execLogBuffer
	x.log = logs.logger()
	var counts crashCounts
	s := x.openCounted(t, &counts)
	evs := sinktest.Events(16)
	poison := evs[4]
	x.set(t, "crash-on-"+sink.FileName(poison.ID), "")
	// A first delivery of ten events, then the runner's redeliveries of
	// the poison event alone, then six more events.
	res := make(map[string]error)
	for i, err := range execWrite(t, s, evs[:10]) {
		res[evs[i].ID] = err
	}
	execWantTemporary(t, res[poison.ID], "the poison event's first delivery")
	res[poison.ID] = writeUntilSettled(t, s, []sink.Event{poison})[poison.ID]
	for i, err := range execWrite(t, s, evs[10:]) {
		res[evs[10+i].ID] = err
	}
	for _, ev := range evs {
		err := res[ev.ID]
		switch {
		case ev.ID == poison.ID:
			if !errors.Is(err, sink.ErrWorkerCrash) || !sink.IsPermanent(err) {
				t.Errorf("poison event: want a permanent ErrWorkerCrash, got %v", err)
			}
		case err != nil:
			t.Errorf("event %s: %v", ev.ID, err)
		case x.Stored(t, ev.ID) != 1:
			t.Errorf("event %s answered ok but not stored", ev.ID)
		}
	}
	if n := x.received(t)[poison.ID]; n != 3 {
		t.Errorf("the poison event reached a worker %d times, want 3", n)
	}
	if n := counts.crashes.Load(); n != 3 {
		t.Errorf("%d crashes counted, want 3", n)
	}
	if len(logs.lines("poison event", "event_id="+poison.ID, "crashes=3")) != 1 {
		t.Errorf("the poison event is not logged once with its crashes:\n%s", logs.String())
	}
}

// A worker that dies on whatever it is given is broken, not fed poison:
// its events fail temporarily however often they are sent, and are done
// once it works again.
func TestExecSink_BrokenWorkerPoisonsNothing(t *testing.T) {
	x := newExecTarget(t)
	x.cfg = func(c *topology.ExecSinkConfig) { c.RestartBackoff = topology.Duration(10 * time.Millisecond) }
	s := x.openExec(t)
	evs := sinktest.Events(5)
	if err := execAllOK(execWrite(t, s, evs[:1])); err != nil {
		t.Fatal(err)
	}
	x.set(t, "crash-every", "1")
	crashes := 0
	for attempt := 0; attempt < 100 && crashes < 6; attempt++ {
		for i, err := range execWrite(t, s, evs) {
			execWantTemporary(t, err, fmt.Sprintf("attempt %d, event %d", attempt, i))
		}
		crashes = -1 // the event answered before
		for _, n := range x.received(t) {
			crashes += n
		}
		time.Sleep(50 * time.Millisecond) // the sink's restart delay; not for correctness
	}
	if crashes < 6 {
		t.Fatalf("the workers received events %d times, want at least 6 (each one crash)", crashes)
	}
	x.clear(t, "crash-every")
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error { return execAllOK(execWrite(t, s, evs)) })
}
