// Package demo is `leafline demo`: L1, a hub and an edge in this process
// (a systest.System), a link cut in the middle, and a count of what L1
// recorded.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/internal/jsmsg"
	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/internal/progress"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"
	"github.com/leafline/leafline/systest"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// RunOptions shape Run.
type RunOptions struct {
	Events  int           // events published at L1; zero means 1000
	Cut     time.Duration // how long the edge↔hub link is cut; zero means 3s
	Timeout time.Duration // how long to wait for every completion; zero means 2m
	// Dir keeps the data under this directory; empty means a temp dir,
	// removed at the end.
	Dir string
	// Bad events are published with a payload above the edge's
	// max_message_bytes: a permanent failure. With DeadLetter they are
	// dead-lettered and reported to L1 as dead_lettered.
	Bad int
	// DeadLetter enables the edge's DLQ (dead_letter.enabled).
	DeadLetter bool
	// AckConfirm enables confirmed ACKs (delivery.ack_confirmation.enabled).
	AckConfirm bool
	// Sink is edge1's sink; the zero value means the store sink. With
	// another sink, the demo hands the events to the user's own target.
	Sink      topology.SinkConfig
	Progress  io.Writer // human progress lines; nil discards
	Logger    *slog.Logger
	Configure func(*topology.Config)
	// Hold, if set, is called with the result while the sites still run;
	// they stop when it returns (the demo's --keep waits for Ctrl-C).
	Hold func(Result)
}

// Result is what the demo counted. Completed counts events with a
// terminal record at L1 (processed, or dead_lettered for bad events).
// Of the others, Incomplete counts those that can still complete when the
// demo gives up: their receipt is in the edge's outbox, or the edge has
// yet to process them (they are in its stream unacknowledged, or not yet
// there). Lost counts the rest: they can no longer complete.
type Result struct {
	Published, Processed, Completed, DeadLettered, DuplicateCompletions int
	Incomplete, Lost                                                    int
}

// Summary is the demo's one-line result.
func (r Result) Summary() string {
	return fmt.Sprintf("summary published=%d processed=%d completed=%d duplicate_completions=%d incomplete=%d lost=%d",
		r.Published, r.Processed, r.Completed, r.DuplicateCompletions, r.Incomplete, r.Lost)
}

// OK reports whether every event completed once.
func (r Result) OK() bool {
	return r.Lost == 0 && r.Incomplete == 0 && r.DuplicateCompletions == 0 && r.Completed == r.Published
}

// Run runs L1, a hub and one edge in this process on loopback,
// publishes half of the events, cuts the edge↔hub link, publishes the other
// half while the edge goes on processing what it has (its receipts pile up
// in its local receipts stream), restores the link, and waits until L1 has
// recorded a completion for every published event.
func Run(ctx context.Context, o RunOptions) (Result, error) {
	o.setDefaults()
	r := &run{o: o, say: func(format string, a ...any) { fmt.Fprintf(o.Progress, "demo: "+format+"\n", a...) }}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "leafline-demo-")
		if err != nil {
			return r.res, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	defer r.close()
	if err := r.start(ctx, dir); err != nil {
		return r.res, err
	}
	if err := r.publishAcrossCut(ctx); err != nil {
		return r.res, err
	}
	r.awaitCompletions(ctx)
	r.report(ctx)
	if o.Hold != nil {
		o.Hold(r.res)
	}
	return r.res, nil
}

func (o *RunOptions) setDefaults() {
	if o.Events <= 0 {
		o.Events = 1000
	}
	if o.Cut <= 0 {
		o.Cut = 3 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// run is one demo run's state, step by step.
type run struct {
	o          RunOptions
	say        func(format string, a ...any)
	ls         *systest.System
	l1, e1     *box.App
	nc, enc    *nats.Conn
	js, ejs    jetstream.JetStream
	ids, bad   []string // the good and the bad events published
	restoredAt time.Time
	res        Result
	waitErr    error
}

// start runs the three sites and connects to L1 and the edge.
func (r *run) start(ctx context.Context, dir string) error {
	o := r.o
	configure := func(c *topology.Config) {
		if c.Site == "edge1" {
			c.DeadLetter.Enabled = o.DeadLetter
			c.Delivery.AckConfirmation.Enabled = o.AckConfirm
			if o.Sink.Type != "" {
				c.Sink = o.Sink
			}
			if o.Bad > 0 {
				c.Delivery.MaxMessageBytes = demoMaxMessageBytes
			}
		}
		if o.Configure != nil {
			o.Configure(c)
		}
	}
	ls, err := systest.New(dir, systest.Options{Configure: configure, Logger: o.Logger}, nil)
	if err != nil {
		return err
	}
	r.ls = ls
	if err := ls.StartAll(ctx); err != nil {
		return err
	}
	l1, hub, e1 := ls.App("l1"), ls.App("hub"), ls.App("edge1")
	r.l1, r.e1 = l1, e1
	r.say("started l1 (nats %s, ops http://%s), hub, edge1 (nats %s, sink %s) under %s", l1.ClientURL(), l1.OpsAddr(), e1.ClientURL(), ls.Configs["edge1"].Sink.Type, dir)
	if err := waitFor(ctx, 30*time.Second, func() bool { return hub.UpstreamConnected() && e1.UpstreamConnected() }); err != nil {
		return fmt.Errorf("leafnode links did not come up: %w", err)
	}
	r.say("leafnode links up: edge1 -> hub -> l1 (mutual TLS with a private CA under %s, an nkey per site, per-link permissions; receipts signed per edge)", filepath.Join(dir, "pki"))
	if r.nc, r.js, err = jsmsg.Connect(l1.ClientURL()); err != nil {
		return err
	}
	r.enc, r.ejs, err = jsmsg.Connect(e1.ClientURL())
	return err
}

func (r *run) close() {
	if r.nc != nil {
		r.nc.Close()
	}
	if r.enc != nil {
		r.enc.Close()
	}
	if r.ls != nil {
		r.ls.Close()
	}
}

// publishAcrossCut publishes half of the events, cuts edge1's link,
// publishes the rest while the edge works on, and restores the link.
func (r *run) publishAcrossCut(ctx context.Context) error {
	o, t, l1 := r.o, r.ls.Topology, r.l1
	first := o.Events / 2
	n, err := publishEvents(ctx, r.js, first, &r.ids)
	r.res.Published += n
	if err != nil {
		return err
	}
	r.say("published %d events at l1", n)
	if o.Bad > 0 {
		if _, err := publishBad(ctx, r.js, o.Bad, &r.bad); err != nil {
			return err
		}
		r.res.Published += len(r.bad)
		r.say("published %d bad events (payload above the edge's max_message_bytes); dlq=%t ack_confirmation=%t", len(r.bad), o.DeadLetter, o.AckConfirm)
	}
	if err := waitFor(ctx, 30*time.Second, func() bool { return localsys.StreamState(ctx, r.ejs, t.Events.EdgeStream).LastSeq >= uint64(first) }); err != nil {
		return fmt.Errorf("events did not reach the edge: %w", err)
	}

	r.ls.Links["edge1"].Cut()
	cutAt := time.Now()
	r.say("link edge1<->hub CUT for %s; edge1 had received %d events in %s", o.Cut, localsys.StreamState(ctx, r.ejs, t.Events.EdgeStream).LastSeq, t.Events.EdgeStream)
	n, err = publishEvents(ctx, r.js, o.Events-first, &r.ids)
	r.res.Published += n
	if err != nil {
		return err
	}
	r.say("published %d more events at l1 while the link is cut", n)
	ctxsleep.For(ctx, time.Until(cutAt.Add(o.Cut)))
	processed := processedAt(r.e1, r.ls.Configs["edge1"], 0)
	r.say("during the cut: edge1 processed %d events, holds %d receipts for the hub in %s; l1 applied %d completions",
		processed, localsys.StreamState(ctx, r.ejs, t.Receipts.EdgeStream).Msgs, t.Receipts.EdgeStream, leafline.Completions(l1).Stats().Applied)
	r.say("l1 summary during the cut: %s", summaryLine(ctx, l1))
	r.ls.Links["edge1"].Restore()
	r.restoredAt = time.Now()
	r.say("link restored")
	return nil
}

// awaitCompletions waits until L1 has a terminal record from edge1 for
// every event, or the timeout passes, and counts the result.
func (r *run) awaitCompletions(ctx context.Context) {
	store := leafline.Completions(r.l1).State()
	var open []string // the events without their terminal record at L1
	terminal := func(ids []string, want receipt.Status) int {
		c := 0
		for _, id := range ids {
			if comp, err := store.Get(ctx, id); err == nil {
				if p, ok := comp.Processors["edge1"]; ok && p.Status == want {
					c++
					continue
				}
			}
			open = append(open, id)
		}
		return c
	}
	total := len(r.ids) + len(r.bad)
	bar := progress.Start(r.o.Progress, "demo: receipts applied at l1", int64(total)) // a terminal only
	r.waitErr = waitFor(ctx, r.o.Timeout, func() bool {
		applied := int(leafline.Completions(r.l1).Stats().Applied)
		bar.Set(int64(applied))
		return applied >= total &&
			terminal(r.ids, receipt.StatusProcessed)+terminal(r.bad, receipt.StatusDeadLettered) == total
	})
	bar.Stop()
	res := &r.res
	res.DeadLettered = terminal(r.bad, receipt.StatusDeadLettered)
	res.Completed = terminal(r.ids, receipt.StatusProcessed) + res.DeadLettered
	res.Processed = processedAt(r.e1, r.ls.Configs["edge1"], res.DeadLettered)
	applied := int(leafline.Completions(r.l1).Stats().Applied)
	res.DuplicateCompletions = max(0, applied-res.Completed)
	res.Incomplete = r.stillComing(ctx, open)
	res.Lost = res.Published - res.Completed - res.Incomplete
}

// stillComing counts the events of open (those without their terminal
// record at L1) that can still complete: each one whose receipt edge1's
// outbox holds, and, of the others, as many as edge1 has yet to process:
// its consumer's messages not yet acknowledged, and the events that have
// not reached its stream.
func (r *run) stillComing(ctx context.Context, open []string) int {
	if len(open) == 0 {
		return 0
	}
	n, noReceipt := 0, 0
	for _, id := range open {
		held := false
		for _, st := range []receipt.Status{receipt.StatusProcessed, receipt.StatusDeadLettered} {
			if _, ok, err := leafline.Outbox(r.e1).Get(receipt.Receipt{EventID: id, Processor: "edge1", Status: st}.MsgID()); err == nil && ok {
				held = true
			}
		}
		if held {
			n++
		} else {
			noReceipt++
		}
	}
	cfg := r.ls.Configs["edge1"]
	stream := cfg.Topology.Events.EdgeStream
	toDo := max(0, r.res.Published-int(localsys.StreamState(ctx, r.ejs, stream).LastSeq))
	if c, err := r.ejs.Consumer(ctx, stream, cfg.Delivery.Consumer); err == nil {
		if info, err := c.Info(ctx); err == nil {
			toDo += int(info.NumPending) + info.NumAckPending
		}
	}
	return n + min(noReceipt, toDo)
}

// report says how the run ended and where to look.
func (r *run) report(ctx context.Context) {
	l1 := r.l1
	if r.waitErr == nil {
		r.say("all %d completions recorded at l1 %.2fs after the link was restored", r.res.Completed, time.Since(r.restoredAt).Seconds())
	} else {
		r.say("gave up waiting: %v", r.waitErr)
	}
	r.say("l1 summary after the link healed: %s", summaryLine(ctx, l1))
	until := "until the demo exits (--keep holds the sites up)"
	if r.o.Hold != nil {
		until = "until the demo is interrupted"
	}
	r.say("l1 status API, %s: curl http://%s/v1/summary ; curl http://%s%s", until, l1.OpsAddr(), l1.OpsAddr(), status.EventPath(r.ids[0]))
	if len(r.bad) > 0 {
		dlq := r.ls.Configs["edge1"].DeadLetter.Stream
		r.say("bad events: %d reported as dead_lettered at l1 (of %d); DLQ stream %s holds %d records",
			r.res.DeadLettered, len(r.bad), dlq, localsys.StreamState(ctx, r.ejs, dlq).Msgs)
	}
}

// processedAt counts the events e (configured by cfg) has processed: the events the store
// sink holds, or, with any other sink (whose target the demo cannot read),
// the receipts in the outbox less the dead-lettered ones.
func processedAt(e *box.App, cfg *topology.Config, deadLettered int) int {
	if cfg.Sink.Type == "store" {
		n, _ := sink.CountStored(leafline.Outbox(e).DB())
		return n
	}
	st, err := leafline.Outbox(e).Stats()
	if err != nil {
		return 0
	}
	return st.Pending + st.Published - deadLettered
}

// publishWindow bounds the demo's PubAcks outstanding (the client refuses
// more than its async limit, 4000 by default).
const publishWindow = 1024

// publishEvents publishes n events with at most publishWindow PubAcks
// outstanding and appends the id of each PubAck'ed one to ids, in order.
func publishEvents(ctx context.Context, js jetstream.JetStream, n int, ids *[]string) (int, error) {
	type pending struct {
		f  jetstream.PubAckFuture
		id string
	}
	var window []pending
	acked := 0
	wait := func() error {
		p := window[0]
		window = window[1:]
		select {
		case <-p.f.Ok():
			*ids = append(*ids, p.id)
			acked++
			return nil
		case err := <-p.f.Err():
			return fmt.Errorf("publish: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := 0; i < n; i++ {
		if len(window) == publishWindow {
			if err := wait(); err != nil {
				return acked, err
			}
		}
		id := uuid.Must(uuid.NewV7()).String() // time-ordered: see doc.go, "Event ids"
		m := nats.NewMsg(fmt.Sprintf("events.demo.%d", i%8))
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Data = fmt.Appendf(nil, `{"event_id":%q,"n":%d}`, id, i)
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return acked, err
		}
		window = append(window, pending{f, id})
	}
	for len(window) > 0 {
		if err := wait(); err != nil {
			return acked, err
		}
	}
	return acked, nil
}

// summaryLine renders L1's completion summary in one line.
func summaryLine(ctx context.Context, l1 *box.App) string {
	sum, err := leafline.Completions(l1).Summary(ctx)
	if err != nil {
		return "unavailable: " + err.Error()
	}
	line := fmt.Sprintf("events=%d pending=%d complete=%d dead_lettered=%d overdue=%d",
		sum.Events, sum.Pending, sum.Complete, sum.DeadLettered, sum.Overdue)
	for _, st := range sum.Sites {
		line += fmt.Sprintf(" | %s pending=%d overdue=%d", st.Site, st.Pending, st.Overdue)
	}
	return line
}

// demoMaxMessageBytes is the edge's max_message_bytes in a demo with bad events.
const demoMaxMessageBytes = 4096

// publishBad publishes n events whose payload is too large for the edge.
func publishBad(ctx context.Context, js jetstream.JetStream, n int, ids *[]string) (int, error) {
	for i := 0; i < n; i++ {
		id := "bad-" + uuid.NewString()
		m := nats.NewMsg("events.demo.bad")
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Data = make([]byte, 2*demoMaxMessageBytes)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return i, fmt.Errorf("publish bad event: %w", err)
		}
		*ids = append(*ids, id)
	}
	return n, nil
}

// waitFor polls cond every 50ms until it holds, ctx ends, or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", d)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ctxsleep.For(ctx, 50*time.Millisecond)
	}
	return nil
}
