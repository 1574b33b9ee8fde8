//go:build linux

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/publish"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology"
)

// expiryAfter is the expire_after of the expiry phase's subject.
const expiryAfter = 2 * time.Second

// expiryRes is what expiry found at L1 and at the edge.
type expiryRes struct {
	n                           int
	expired, processed, pending int64
	// once: L1 applied exactly one receipt per event, each expired.
	once bool
	// drain is from the link's restore until L1 applied every receipt.
	drain time.Duration
}

// expiry is the phase expiry: a system of l1, a hub and one edge whose
// subject events.x.> expires after expiryAfter. The edge link is cut,
// Expiry events are published at L1 (as `leafline publish` does, stamping
// their publish time), the link is restored once they are stale, and the
// phase waits until L1 has applied a receipt for each; then it checks
// that every one ended expired at L1 once, that none was processed at
// the edge and that none is pending.
func (r *run) expiry(transport string) {
	n := r.o.Expiry
	r.m.Phase("expiry stale events [" + transport + "]")
	r.m.Track("start l1, a hub and an edge", "", 0, nil)
	env := newBenchEnv(r.tb, r.TempDir(), 1, map[string]string{"edge1": "events.x.>"}, nil, transport)
	defer env.close()
	env.ls.Topology.Events.ExpireAfter = []topology.ExpireRule{{Subject: "events.x.>", After: topology.Duration(expiryAfter)}}
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = "always"
	}
	link := env.ls.Links["edge1"]
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })
	env.open("edge1")
	link.Cut()
	env.waitUntil("edge1 cut", time.Minute, func() bool { return !env.connected("edge1")() })

	pub, err := publish.New(publish.Config{JS: env.js["l1"], Stream: env.ls.Topology.Events.OriginStream})
	if err != nil {
		r.Fatal(err)
	}
	id := r.id("x")
	evs := make([]publish.Event, n)
	for i := range evs {
		evs[i] = publish.Event{ID: id(i), Subject: fmt.Sprintf("events.x.%d", i%8), Data: wireEvent(i, r.o.Size)}
	}
	base := env.applied()
	published := time.Now()
	if _, err := pub.Publish(r.ctx, evs); err != nil {
		r.Fatal(err)
	}
	r.m.Waiting("events going stale behind the cut", time.Until(published.Add(expiryAfter+500*time.Millisecond)))
	r.sleep(time.Until(published.Add(expiryAfter + 500*time.Millisecond)))

	r.m.Track("link restored, expired receipts to L1", "events", int64(n), func() int64 { return int64(env.applied() - base) })
	ph := r.begin("expiry")
	restored := time.Now()
	link.Restore()
	env.waitUntil("expired receipts at L1", 5*time.Minute, func() bool { return env.applied() >= base+uint64(n) })
	res := expiryRes{n: n, drain: time.Since(restored)}
	r.rows = append(r.rows, ph.end("expiry", fmt.Sprintf("stale events after a cut, link restore to all receipts at L1 [%s]", transport), n, nil,
		fmt.Sprintf("expire_after %s", expiryAfter)))

	st := leafline.Completions(env.ls.App("l1")).State()
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	sum, err := st.Summary(ctx)
	if err != nil {
		r.Fatal(err)
	}
	res.expired, res.pending = sum.Expired, sum.Pending
	res.once = env.applied() == base+uint64(n)
	for i := range evs {
		c, err := st.Get(ctx, evs[i].ID)
		if err != nil {
			r.Fatal(err)
		}
		if pr := c.Processors["edge1"]; c.Status != record.EventExpired || pr.Status != receipt.StatusExpired || pr.Conflicts != 0 {
			res.once = false
		}
	}
	res.processed = int64(benchMetric(env.ls.App("edge1"), "leafline_messages_processed_total", nil))
	r.expiries = append(r.expiries, res)
}

// expiryFigures prints expiry's result and returns its figures: the events
// expired at L1, those processed at the edge and those still pending
// (expired=n, processed and pending 0 when it holds), and the drain.
func (r *run) expiryFigures() []Figure {
	if len(r.expiries) == 0 {
		return nil
	}
	x := r.expiries[0]
	fmt.Fprintf(r.out, "expiry: %d stale events after a cut: %d expired at L1 (each once: %t), %d processed at the edge, %d pending; drained in %s\n",
		x.n, x.expired, x.once, x.processed, x.pending, x.drain.Round(time.Millisecond))
	once := 0.0
	if x.once {
		once = 1
	}
	return []Figure{
		{"expired", float64(x.expired)}, {"expired_once", once}, {"expired_processed", float64(x.processed)},
		{"expired_pending", float64(x.pending)}, {"expiry_drain_ms", float64(x.drain.Milliseconds())},
	}
}
