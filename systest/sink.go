package systest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/logx"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/sink/sinktest"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// SinkOptions shape RunSink.
type SinkOptions struct {
	// Outage is how long the target stays down in TargetDownThenBack.
	// Zero means 30s.
	Outage time.Duration
}

// RunSink runs the cases that need a whole leafline system with target as
// the edge's sink: L1, a hub and one edge in this process, on loopback,
// with mutual TLS and signed receipts, events published at L1 and their
// completions read back at L1. They check that the sink's outcomes take
// the runner's paths end to end:
//
//   - PermanentToDeadLetter: a refused event gets a DLQ record and a
//     dead_lettered receipt at L1; the rest of its batch is processed;
//   - TargetDownThenBack: while the target is down nothing is ACKed and
//     nothing completes; once it is back every event completes once;
//   - CrashAfterTargetCommit: the box dies after the target's commit and
//     before anything else; the redelivered event reaches the target
//     again, which holds it once, and L1 records it once;
//   - SlowTarget: a write slower than the consumer's AckWait is covered
//     by in-progress heartbeats: the event is delivered once.
func RunSink(t *testing.T, target sinktest.Target, o SinkOptions) {
	if testing.Short() {
		t.Skip("the box conformance cases run a whole system; skipped with -short")
	}
	if o.Outage <= 0 {
		o.Outage = 30 * time.Second
	}
	b := startBox(t, target)
	t.Run("PermanentToDeadLetter", func(t *testing.T) { b.testPermanent(t) })
	t.Run("TargetDownThenBack", func(t *testing.T) { b.testDown(t, o.Outage) })
	t.Run("CrashAfterTargetCommit", func(t *testing.T) { b.testCrash(t) })
	t.Run("SlowTarget", func(t *testing.T) { b.testSlow(t) })
}

type sinkSystem struct {
	target sinktest.Target
	sink   *watchedSink
	ls     *System
	js     jetstream.JetStream // at L1
}

func startBox(t *testing.T, target sinktest.Target) *sinkSystem {
	t.Helper()
	b := &sinkSystem{target: target, sink: &watchedSink{inner: sinktest.NewSink(t, target), seen: map[string]int{}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(logx.TestWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ls, err := New(t.TempDir(), Options{
		Logger: log,
		Configure: func(c *topology.Config) {
			if c.Site != "edge1" {
				return
			}
			c.DeadLetter.Enabled = true
			// AckWait below the slow case's delay: only heartbeats
			// keep the event from being redelivered.
			c.Delivery.AckWait = topology.Duration(time.Second)
			c.Delivery.InProgress = topology.InProgressConfig{Enabled: true, IntervalMS: 250}
			c.Delivery.Retry.BackoffMS = 200
			c.Delivery.Retry.BackoffMaxMS = 2000
		},
	}, func(site string) []edge.Option {
		if site == "edge1" {
			return []edge.Option{edge.WithSink(b.sink)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.ls = ls
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ls.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		for _, s := range []string{"hub", "edge1"} {
			if !ls.App(s).UpstreamConnected() {
				return fmt.Errorf("%s is not connected upstream", s)
			}
		}
		return nil
	})
	nc, err := nats.Connect(ls.App("l1").ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if b.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return b
}

// publish publishes evs at L1 with their ids as Nats-Msg-Id.
func (b *sinkSystem) publish(t *testing.T, evs []sink.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ev := range evs {
		m := nats.NewMsg("events.sinktest." + ev.Subject[len("events.test."):])
		m.Header.Set(jetstream.MsgIDHeader, ev.ID)
		m.Data = ev.Data
		if _, err := b.js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %s: %v", ev.ID, err)
		}
	}
}

// status is edge1's status for id at L1, or "" while there is none.
func (b *sinkSystem) status(id string) receipt.Status {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := leafline.Completions(b.ls.App("l1")).State().Get(ctx, id)
	if err != nil {
		return ""
	}
	return c.Processors["edge1"].Status
}

func (b *sinkSystem) waitStatus(t *testing.T, d time.Duration, want map[string]receipt.Status) {
	t.Helper()
	check.For(t, d, 50*time.Millisecond, func() error {
		for id, st := range want {
			if got := b.status(id); got != st {
				return fmt.Errorf("event %s: status %q at L1, want %q", id, got, st)
			}
		}
		return nil
	})
}

// acked is edge1's count of messages ACKed after their commit.
func (b *sinkSystem) acked(t *testing.T) float64 {
	t.Helper()
	mfs, err := b.ls.App("edge1").Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "leafline_messages_acked_total" {
			return sum(mf.GetMetric())
		}
	}
	t.Fatal("no leafline_messages_acked_total metric")
	return 0
}

func sum(ms []*dto.Metric) float64 {
	s := 0.0
	for _, m := range ms {
		s += m.GetCounter().GetValue()
	}
	return s
}

func (b *sinkSystem) testPermanent(t *testing.T) {
	r, ok := b.target.(sinktest.Refuser)
	if !ok {
		t.Skip("the target cannot be made to refuse an event (no sinktest.Refuser)")
	}
	evs := sinktest.Events(3)
	r.Refuse(t, evs[1].ID, true, 0)
	b.publish(t, evs)
	b.waitStatus(t, time.Minute, map[string]receipt.Status{
		evs[0].ID: receipt.StatusProcessed,
		evs[1].ID: receipt.StatusDeadLettered,
		evs[2].ID: receipt.StatusProcessed,
	})
	sinktest.WantStored(t, b.target, []sink.Event{evs[0], evs[2]}, 1)
	sinktest.WantStored(t, b.target, evs[1:2], 0)
	// The DLQ record names the event and the cause's class.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ejs := b.edgeJS(t)
	dlq := b.ls.Configs["edge1"].DeadLetter
	msg, err := ejs.Stream(ctx, dlq.Stream)
	if err != nil {
		t.Fatal(err)
	}
	last, err := msg.GetLastMsgForSubject(ctx, dlq.Subject)
	if err != nil {
		t.Fatalf("DLQ record: %v", err)
	}
	rec, err := runner.DecodeDLQRecord(last.Data)
	if err != nil {
		t.Fatal(err)
	}
	if rec.EventID != evs[1].ID || rec.ErrorType != "sink_permanent" {
		t.Fatalf("DLQ record: event %q type %q, want %q sink_permanent", rec.EventID, rec.ErrorType, evs[1].ID)
	}
}

func (b *sinkSystem) edgeJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	return jstest.ConnectURL(t, b.ls.App("edge1").ClientURL())
}

func (b *sinkSystem) testDown(t *testing.T, outage time.Duration) {
	o, ok := b.target.(sinktest.Outage)
	if !ok {
		t.Skip("the target cannot be taken down (no sinktest.Outage)")
	}
	evs := sinktest.Events(10)
	before := b.acked(t)
	o.SetDown(t, true)
	down := true
	t.Cleanup(func() {
		if down {
			o.SetDown(t, false)
		}
	})
	b.publish(t, evs)
	// For the whole outage: no ACK, no completion, and the sink is being
	// tried (the runner does not give up on the events).
	end := time.Now().Add(outage)
	for time.Now().Before(end) {
		if got := b.acked(t); got != before {
			t.Fatalf("%v messages ACKed while the target is down", got-before)
		}
		for _, ev := range evs {
			if st := b.status(ev.ID); st != "" {
				t.Fatalf("event %s has status %q at L1 while the target is down", ev.ID, st)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if n := b.sink.deliveries(evs[0].ID); n < 2 {
		t.Errorf("the runner handed an event to the down target %d times in %v; want retries", n, outage)
	}
	o.SetDown(t, false)
	down = false
	want := map[string]receipt.Status{}
	for _, ev := range evs {
		want[ev.ID] = receipt.StatusProcessed
	}
	b.waitStatus(t, time.Minute, want)
	sinktest.WantStored(t, b.target, evs, 1)
}

func (b *sinkSystem) testCrash(t *testing.T) {
	evs := sinktest.Events(1)
	id := evs[0].ID
	held, release := b.sink.holdAfter(id)
	b.publish(t, evs)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the event did not reach the target within 30s")
	}
	if b.target.Stored(t, id) != 1 {
		t.Fatal("the target does not hold the event after its write returned")
	}
	// The box dies with the target's write done and nothing after it.
	app := b.ls.App("edge1")
	killed := make(chan struct{})
	go func() { b.ls.Kill("edge1"); close(killed) }()
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if app.Server().Running() {
			return errors.New("edge1's server is still running")
		}
		return nil
	})
	close(release)
	<-killed
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.ls.Start(ctx, "edge1"); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, time.Minute, map[string]receipt.Status{id: receipt.StatusProcessed})
	if n := b.sink.deliveries(id); n < 2 {
		t.Errorf("the event reached the target %d times; want the redelivery after the crash", n)
	}
	sinktest.WantStored(t, b.target, evs, 1)
	c, err := leafline.Completions(b.ls.App("l1")).State().Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if c.Conflict {
		t.Errorf("L1 records a conflict for %s", id)
	}
}

func (b *sinkSystem) testSlow(t *testing.T) {
	d, ok := b.target.(sinktest.Delayer)
	if !ok {
		t.Skip("the target cannot be slowed (no sinktest.Delayer)")
	}
	d.SetDelay(t, 1500*time.Millisecond) // above the 1s AckWait, below the sink's timeout
	t.Cleanup(func() { d.SetDelay(t, 0) })
	evs := sinktest.Events(1)
	b.publish(t, evs)
	b.waitStatus(t, time.Minute, map[string]receipt.Status{evs[0].ID: receipt.StatusProcessed})
	if n := b.sink.deliveries(evs[0].ID); n != 1 {
		t.Errorf("the slow event was handed to the target %d times; heartbeats should have kept it from redelivery", n)
	}
	sinktest.WantStored(t, b.target, evs, 1)
}

// watchedSink counts each event's deliveries to the sink, and can stand
// for a crash right after the target's commit.
type watchedSink struct {
	inner sink.Sink
	mu    sync.Mutex
	seen  map[string]int
	hold  string
	held  chan struct{}
	wait  chan struct{}
}

func (w *watchedSink) deliveries(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[id]
}

// holdAfter makes the next write that carries id stop after the target's
// commit: held is closed then, and the write fails (as if the process had
// died there) once release is closed.
func (w *watchedSink) holdAfter(id string) (held <-chan struct{}, release chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hold, w.held, w.wait = id, make(chan struct{}), make(chan struct{})
	return w.held, w.wait
}

var errCrashed = errors.New("sinktest: the box died after the target's commit")

func (w *watchedSink) Write(ctx context.Context, evs []sink.Event) []error {
	w.mu.Lock()
	id := ""
	for _, ev := range evs {
		w.seen[ev.ID]++
		if w.hold != "" && ev.ID == w.hold {
			id = ev.ID
		}
	}
	held, wait := w.held, w.wait
	if id != "" {
		w.hold = ""
	}
	w.mu.Unlock()
	errs := w.inner.Write(ctx, evs)
	if id == "" {
		return errs
	}
	for i, ev := range evs {
		if ev.ID == id && errs[i] != nil {
			// The target did not commit it: hold the next write of it.
			w.mu.Lock()
			w.hold = id
			w.mu.Unlock()
			return errs
		}
	}
	close(held)
	<-wait
	for i := range errs {
		errs[i] = errCrashed
	}
	return errs
}
