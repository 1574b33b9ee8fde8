//go:build linux

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/topology"
)

// capRes is what cap measured on the hub-edge link.
type capRes struct {
	window time.Duration
	// down and up are message bytes a second (leafline_link_bytes_total
	// at the hub): hub to edge, edge to hub.
	down, up float64
	// events are the events the edge stored during the window.
	events uint64
	// leftDown and leftUp are the backlogs left at the end: events at
	// the hub for the edge, receipts at the edge for the hub. Zero means
	// the link ran dry and the rate is not the cap's.
	leftDown, leftUp uint64
	// urgent is each urgent event's time from its publish at L1 to its
	// store at the edge, across the capped link behind the backlog; done
	// to its completion at L1, its receipt back across the link behind
	// the receipts' backlog.
	urgent, done []time.Duration
}

// capLink is the phase cap: l1, a hub and one edge over the relay, the
// hub-edge link capped at capBytes. It preloads a backlog each way with
// the link cut (events at the hub for the edge; receipts at the edge,
// from events it processed behind the cut), restarts every box with the
// cap, restores the link, and after capWarm counts the message bytes the
// link carries each way for CapWindow at the hub. Everything the link
// carries counts, as leafline_link_bytes_total does: the relays' pull
// requests and ACKs too, a few hundred bytes a second against the cap's
// 64,000. Meanwhile it publishes an event of the class urgent once a
// second and times it from its publish at L1 to its store at the edge:
// the class's link shares the cap and goes first.
func (r *run) capLink() {
	w := r.o.CapWindow
	nUp, nDown := capBacklogs(w, r.o.Size)
	r.m.Phase("cap link bandwidth cap [relay]")
	r.m.Track("start l1, a hub and an edge", "", 0, nil)
	env := newBenchEnv(r.tb, r.TempDir(), 1, map[string]string{"edge1": "events.w.>"}, nil, topology.TransportRelay)
	defer env.close()
	env.ls.Topology.Events.Priorities = []topology.Priority{{Name: "urgent", Subjects: []string{"events.w.urgent.>"}}}
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = "always"
	}
	if d := &env.ls.Configs["edge1"].Delivery; r.o.Batch == 0 && r.o.BacklogBatch == 0 {
		d.BatchSize, d.BacklogBatchSize = capReceiptBatch, capReceiptBatch
	}
	link := env.ls.Links["edge1"]
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })

	r.m.Track("receipts backlog: events to the edge", "events", int64(nUp), since(env.count("edge1", "L2A")))
	if err := wirePublish(r.ctx, env.js["l1"], nUp, r.o.Size, r.id("cu")); err != nil {
		r.Fatal(err)
	}
	env.waitUntil("events at edge1", 10*time.Minute, func() bool { return env.count("edge1", "L2A")() >= uint64(nUp) })
	link.Cut()
	env.waitUntil("edge1 cut", time.Minute, func() bool { return !env.connected("edge1")() })
	tr := env.traces["edge1"]
	r.m.Track("receipts backlog: processed behind the cut", "events", int64(nUp), tr.acks.Load)
	env.open("edge1")
	env.waitUntil("edge1 processed", 10*time.Minute, func() bool { return tr.acks.Load() >= int64(nUp) })

	r.m.Track("events backlog at the hub", "events", int64(nDown), since(env.count("hub", "HA")))
	ha := env.count("hub", "HA")() + uint64(nDown)
	if err := wirePublish(r.ctx, env.js["l1"], nDown, r.o.Size, r.id("cd")); err != nil {
		r.Fatal(err)
	}
	env.waitUntil("events at the hub", 10*time.Minute, func() bool { return env.count("hub", "HA")() >= ha })

	r.m.Track(fmt.Sprintf("restart with the link capped at %dB/s", capBytes), "", 0, nil)
	edge1, _ := env.ls.Topology.Site("edge1")
	edge1.Bandwidth = fmt.Sprintf("%dB/s", capBytes)
	env.restart("always")
	env.open("edge1")
	link.Restore()
	env.waitUntil("edge1 link", time.Minute, env.connected("edge1"))

	r.m.Waiting("warm-up", capWarm)
	r.sleep(capWarm)

	hub := env.ls.App("hub")
	bytes := func(dir string) float64 {
		return benchMetric(hub, "leafline_link_bytes_total", map[string]string{"link": "edge1", "direction": dir})
	}
	stored := env.count("edge1", "L2A")
	down0, up0, ev0 := bytes("out"), bytes("in"), stored()
	r.m.Waiting(fmt.Sprintf("measuring both directions under %dB/s", capBytes), w)
	ph := r.begin("cap")
	t0 := time.Now()
	ids, at, urgent := r.urgentAcross(env, t0.Add(w))
	r.sleep(time.Until(t0.Add(w)))
	down1, up1, ev1 := bytes("out"), bytes("in"), stored()
	secs := time.Since(t0).Seconds()
	res := capRes{window: w, down: (down1 - down0) / secs, up: (up1 - up0) / secs, events: ev1 - ev0, urgent: urgent,
		leftDown: relayBacklog(r.ctx, env, "hub", env.ls.Topology.Events.HubStream, "edge1"),
		leftUp:   relayBacklog(r.ctx, env, "edge1", env.ls.Topology.Receipts.EdgeStream, "hub")}
	res.done = r.urgentDone(env, ids, at)
	r.rows = append(r.rows, ph.end("cap", fmt.Sprintf("edge link capped at %dB/s each way [relay]", capBytes), int(res.events), nil,
		fmt.Sprintf("message B/s down %.0f up %.0f; left: %d events, %d receipts", res.down, res.up, res.leftDown, res.leftUp)))
	r.caps = append(r.caps, res)
}

// urgentAcross publishes an urgent event at L1 once a second until end and
// returns each one's id, publish time, and time until edge1's class
// stream has stored it.
func (r *run) urgentAcross(env *benchEnv, end time.Time) (ids []string, at []time.Time, out []time.Duration) {
	edge1, _ := env.ls.Topology.Site("edge1")
	class := env.ls.Topology.Classes(edge1)
	if len(class) == 0 {
		r.Fatal(fmt.Errorf("bench: edge1 takes no class"))
	}
	stored := env.count("edge1", class[0].Stream)
	id := r.id("cx")
	for i := 0; time.Now().Add(time.Second).Before(end) && r.ctx.Err() == nil; i++ {
		next, before := time.Now().Add(time.Second), stored()
		ids, at = append(ids, id(i)), append(at, time.Now())
		r.publishOne(env, fmt.Sprintf("events.w.urgent.%d", i), id(i))
		env.waitUntil("an urgent event at the edge", time.Until(end)+time.Minute, func() bool { return stored() > before })
		out = append(out, time.Since(at[i]))
		r.sleep(time.Until(next))
	}
	return ids, at, out
}

// urgentDone waits, 10 minutes at most, until L1 has completed the
// events ids published at the times at, and returns each one's time from
// its publish to its completion.
func (r *run) urgentDone(env *benchEnv, ids []string, at []time.Time) []time.Duration {
	st := leafline.Completions(env.ls.App("l1")).State()
	env.waitUntil("the urgent events completed at L1", 10*time.Minute, func() bool {
		for _, id := range ids {
			if c, err := st.Get(r.ctx, id); err != nil || c.Processors["edge1"].ReceivedAt.IsZero() {
				return false
			}
		}
		return true
	})
	out := make([]time.Duration, len(ids))
	for i, id := range ids {
		out[i] = r.completedAt(st, id).Sub(at[i])
	}
	return out
}

// relayBacklog is what the relay consumer of taker on stream at site has
// not had ACKed: pending and in flight.
func relayBacklog(ctx context.Context, env *benchEnv, site, stream, taker string) uint64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := env.js[site].Consumer(ctx, stream, topology.RelayConsumerName(taker))
	if err != nil {
		return 0
	}
	info := c.CachedInfo()
	return info.NumPending + uint64(info.NumAckPending)
}

// capFigures prints cap's result and returns its figures: the measured
// rates each way, and cap_error_pct, the larger of the two directions'
// |rate - cap| / cap in percent.
func (r *run) capFigures() []Figure {
	if len(r.caps) == 0 {
		return nil
	}
	c := r.caps[0]
	errPct := func(rate float64) float64 {
		d := rate - capBytes
		return max(d, -d) / capBytes * 100
	}
	fmt.Fprintf(r.out, "cap: edge link capped at %d bytes/s each way, measured over %s: down %.0f B/s (%.2f%% off), up %.0f B/s (%.2f%% off); %d events, %d receipts still waiting\n",
		capBytes, c.window, c.down, errPct(c.down), c.up, errPct(c.up), c.leftDown, c.leftUp)
	if c.leftDown == 0 || c.leftUp == 0 {
		fmt.Fprintln(r.out, "cap: a backlog ran out during the window: that direction's rate is below the cap for want of messages, not because of it")
	}
	p99 := benchPct(c.urgent, 0.99)
	fmt.Fprintf(r.out, "cap: %d urgent events, one a second, across the capped link behind the backlog: publish at L1 to stored at the edge p50 %s, p99 %s\n",
		len(c.urgent), benchPct(c.urgent, 0.5).Round(time.Millisecond), p99.Round(time.Millisecond))
	done := benchPct(c.done, 0.99)
	fmt.Fprintf(r.out, "cap: the same, to complete at L1, their receipts back across the link behind the receipts' backlog: p50 %s, p99 %s\n",
		benchPct(c.done, 0.5).Round(time.Millisecond), done.Round(time.Millisecond))
	return []Figure{
		{"cap_error_pct", max(errPct(c.down), errPct(c.up))},
		{"cap_down_bytes_per_s", c.down}, {"cap_up_bytes_per_s", c.up},
		{"cap_urgent_p99_ms", float64(p99) / 1e6},
		{"cap_urgent_complete_p99_ms", float64(done) / 1e6},
	}
}
