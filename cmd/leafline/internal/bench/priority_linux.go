//go:build linux

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/topology"
)

// urgentEvery is how often the priority phase publishes an urgent event
// once the link is back.
const urgentEvery = time.Second

// urgentShare is the rate of the urgent events, as a share of the normal
// backlog's drain rate, while priority measures normal work's share.
const urgentShare = 0.1

// priorityRes is one system of the priority phase: with the urgent class
// or without it.
type priorityRes struct {
	classes bool
	backlog int
	// urgent is each urgent event's time from its publish at L1 to its
	// completion there.
	urgent []time.Duration
	// drain is from the link's restore until the last normal event
	// completed at L1.
	drain time.Duration
	// normal and urgentN are the completions at L1 of each kind while
	// urgent events flowed at urgentShare of the rate (classes only).
	normal, urgentN int
}

// priority is the phase priority, run twice: a system of l1, a hub and an
// edge over the relay, with the class urgent (events.urgent.>) and
// without classes. See priorityRun.
func (r *run) priority() {
	for _, classes := range []bool{true, false} {
		r.priorityRun(classes)
	}
}

// priorityRun builds PriorityBacklog normal events at the hub behind a
// cut edge link, restores the link and publishes Urgent events at L1,
// one every urgentEvery; it times each from its publish to its completion
// at L1. With classes it then measures normal work's share: a fifth of
// the backlog again behind a cut, drained while urgent events flow at
// urgentShare of the first drain's rate.
func (r *run) priorityRun(classes bool) {
	res := priorityRes{classes: classes, backlog: r.o.PriorityBacklog}
	label := map[bool]string{true: "urgent class", false: "no classes"}[classes]
	r.m.Phase("priority [" + label + "]")
	r.m.Track("start l1, a hub and an edge", "", 0, nil)
	env := newBenchEnv(r.tb, r.TempDir(), 1, nil, nil, topology.TransportRelay)
	defer env.close()
	if classes {
		env.ls.Topology.Events.Priorities = []topology.Priority{{Name: "urgent", Subjects: []string{"events.urgent.>"}}}
	}
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = "always"
	}
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })
	env.open("edge1")

	uid, nid := r.id("u"), r.id("n")
	restored, base := r.backlogBehindCut(env, "n", res.backlog)
	ph := r.begin("priority")
	at := make([]time.Time, r.o.Urgent)
	for i := range at {
		r.sleep(time.Until(restored.Add(time.Duration(i) * urgentEvery)))
		at[i] = time.Now()
		r.publishOne(env, fmt.Sprintf("events.urgent.%d", i), uid(i))
	}
	env.waitUntil("every event completed at L1", 10*time.Minute, func() bool { return env.applied() >= base+uint64(res.backlog+len(at)) })
	row := ph.end("priority", "", 0, nil, "")
	st := leafline.Completions(env.ls.App("l1")).State()
	for i := range at {
		res.urgent = append(res.urgent, r.completedAt(st, uid(i)).Sub(at[i]))
	}
	var last time.Time
	for i := range res.backlog {
		if t := r.completedAt(st, nid(i)); t.After(last) {
			last = t
		}
	}
	res.drain = last.Sub(restored)
	row.what = fmt.Sprintf("urgent events behind a backlog of %d at the hub, publish to complete at L1 [%s]", res.backlog, label)
	row.n, row.lat = len(at), res.urgent
	row.note = fmt.Sprintf("one every %s from the restore; the backlog drained in %s", urgentEvery, res.drain.Round(time.Millisecond))
	r.rows = append(r.rows, row)
	if classes {
		r.normalShare(env, &res)
	}
	r.priorities = append(r.priorities, res)
}

// backlogBehindCut cuts edge1's link, publishes n events on events.<p>.*
// at L1, waits until the hub holds them and restores the link. It
// returns the restore's time and L1's applied count before the events.
func (r *run) backlogBehindCut(env *benchEnv, p string, n int) (time.Time, uint64) {
	link := env.ls.Links["edge1"]
	link.Cut()
	env.waitUntil("edge1 cut", time.Minute, func() bool { return !env.connected("edge1")() })
	base := env.applied()
	hub := env.count("hub", env.ls.Topology.Events.HubStream)
	before := hub()
	r.m.Track("backlog at the hub behind the cut", "events", int64(n), func() int64 { return int64(hub() - before) })
	id := r.id(p)
	if err := benchPublish(r.ctx, env.js["l1"], n, r.payload, func(i int) string { return fmt.Sprintf("events.%s.%d", p, i%8) }, id, nil); err != nil {
		r.Fatal(err)
	}
	env.waitUntil("the backlog at the hub", 5*time.Minute, func() bool { return hub()-before >= uint64(n) })
	r.m.Track("link restored, every event to L1", "events", int64(n), func() int64 { return int64(env.applied() - base) })
	restored := time.Now()
	link.Restore()
	return restored, base
}

// publishOne publishes one event at L1 and waits for its PubAck.
func (r *run) publishOne(env *benchEnv, subject, id string) {
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Data = r.payload
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	if _, err := env.js["l1"].PublishMsg(ctx, m); err != nil {
		r.Fatal(err)
	}
}

// completedAt is when L1 applied edge1's receipt for the event id.
func (r *run) completedAt(st record.State, id string) time.Time {
	c, err := st.Get(r.ctx, id)
	if err != nil {
		r.Fatal(err)
	}
	return c.Processors["edge1"].ReceivedAt
}

// normalShare builds a fifth of the backlog again behind a cut and, from
// the restore until it has drained, publishes urgent events at
// urgentShare of the first drain's rate, in a batch every 100ms; it
// counts the completions at L1 of each kind while they flowed.
func (r *run) normalShare(env *benchEnv, res *priorityRes) {
	n := max(res.backlog/5, 1)
	rate := float64(res.backlog) / res.drain.Seconds() * urgentShare
	uid, nid := r.id("s"), r.id("m")
	restored, base := r.backlogBehindCut(env, "m", n)
	var sent int
	for env.applied() < base+uint64(n+sent) && r.ctx.Err() == nil {
		// As many as the rate asks for by now: a tick that took longer
		// than 100ms is made up by the next.
		tick, from := time.Now(), sent
		k := max(int(rate*time.Since(restored).Seconds())-sent, 0)
		if err := benchPublish(r.ctx, env.js["l1"], k, r.payload, func(i int) string { return fmt.Sprintf("events.urgent.s%d", (from+i)%8) },
			func(i int) string { return uid(from + i) }, nil); err != nil {
			r.Fatal(err)
		}
		sent += k
		if env.applied() >= base+uint64(n) {
			break // the normal backlog has drained
		}
		r.sleep(time.Until(tick.Add(100 * time.Millisecond)))
	}
	stopped := time.Now()
	env.waitUntil("every event completed at L1", 5*time.Minute, func() bool { return env.applied() >= base+uint64(n+sent) })
	st := leafline.Completions(env.ls.App("l1")).State()
	within := func(t time.Time) bool { return !t.Before(restored) && !t.After(stopped) }
	for i := range n {
		if within(r.completedAt(st, nid(i))) {
			res.normal++
		}
	}
	for i := range sent {
		if within(r.completedAt(st, uid(i))) {
			res.urgentN++
		}
	}
}

// priorityFigures prints priority's results and returns their figures:
// the urgent events' p99 with the class and without, the drains, and
// normal work's share while urgent events flowed.
func (r *run) priorityFigures() []Figure {
	var figs []Figure
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for _, x := range r.priorities {
		suffix := map[bool]string{true: "", false: "_no_priority"}[x.classes]
		p50, p99 := benchPct(x.urgent, 0.5), benchPct(x.urgent, 0.99)
		fmt.Fprintf(r.out, "priority%s: %d urgent events behind %d at the hub: publish to complete at L1 p50 %s, p99 %s; the backlog drained in %s\n",
			suffix, len(x.urgent), x.backlog, p50.Round(time.Millisecond), p99.Round(time.Millisecond), x.drain.Round(time.Millisecond))
		figs = append(figs, Figure{"urgent_p99_ms" + suffix, ms(p99)}, Figure{"priority_drain_ms" + suffix, float64(x.drain.Milliseconds())})
		if x.classes && x.normal+x.urgentN > 0 {
			share := float64(x.normal) / float64(x.normal+x.urgentN)
			fmt.Fprintf(r.out, "priority: with urgent events published at %.0f%% of the backlog's drain rate, normal work completed %d of the %d events completed meanwhile (share %.3f; at least 1 batch in 4 is stated)\n",
				urgentShare*100, x.normal, x.normal+x.urgentN, share)
			figs = append(figs, Figure{"normal_share", share})
		}
	}
	return figs
}
