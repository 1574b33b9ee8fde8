//go:build linux

package bench

import (
	"fmt"
	"time"

	"github.com/leafline/leafline/topology"
)

// parkDuplicateWindow is the origin stream's duplicate window in park:
// L1 sends a released event again only once it is older than the window
// (the stream would drop the copy as a duplicate), so a short one starts
// the catch-up soon after the parked edge is back.
const parkDuplicateWindow = 5 * time.Second

// parkWithin bounds each of park's waits.
const parkWithin = 30 * time.Minute

// parkRes is what park measured.
type parkRes struct {
	n, size     int
	streamBytes int64
	// both and parked are from the publish of a set until edge1 has
	// completed each of its events at L1: with both edges up, and with
	// edge2 stopped.
	both, parked time.Duration
	// catchup is from edge2's ready, after it was parked, until it has
	// completed each event of the set published while it was away.
	catchup time.Duration
	// released and resent count edge2's events the hub released
	// (releasedUp: while both edges were up) and L1 sent it again.
	released, releasedUp, resent float64
	// lost counts the events of both sets not complete for both edges
	// at the end; duplicates the receipts L1 applied beyond one per
	// event and edge.
	lost, duplicates int
}

// park is the phase park: a system of l1, a hub and two edges over the
// relay, the hub box's streams capped at ParkStreamMiB. ParkEvents events
// are published with both edges up, and as many again with edge2 stopped;
// each set is timed until edge1 has completed each event at L1. Then
// edge2 is started again and timed until it has completed the second set;
// last, every event of both sets must be complete for both edges, each
// receipt applied once.
func (r *run) park() {
	o := r.o
	n := o.ParkEvents
	res := parkRes{n: n, size: o.ParkSize, streamBytes: int64(o.ParkStreamMiB) << 20}
	r.m.Phase("park an edge parked [relay]")
	r.m.Track("start l1, a hub and two edges", "", 0, nil)
	env := newBenchEnv(r.tb, r.TempDir(), 2, nil, nil, topology.TransportRelay)
	defer env.close()
	env.ls.Topology.Events.DuplicateWindow = topology.Duration(parkDuplicateWindow)
	// Every box but the hub has room for both sets and the copies L1
	// sends again.
	room := int64(3*n) * int64(o.ParkSize+512)
	for name, c := range env.ls.Configs {
		c.JetStream.SyncInterval = "always"
		if name == "hub" {
			c.JetStream.MaxStreamBytes = res.streamBytes
		} else {
			c.JetStream.MaxStreamBytes = max(c.JetStream.MaxStreamBytes, room)
		}
	}
	env.startOpen()
	hub, l1 := env.ls.App("hub"), env.ls.App("l1")
	released := func() float64 {
		return benchMetric(hub, "leafline_edge_backlog_released_messages_total", map[string]string{"edge": "edge2"})
	}
	payload := benchPayload(o.ParkSize)
	base := env.applied()

	up, away := r.id("pu"), r.id("pp")
	res.both = r.parkSet(env, "park_both", up, payload, "both edges up")
	w := env.watchComplete(up, n, "edge2")
	r.m.Track("both edges up: edge2 completes", "events", int64(n), w.count)
	env.waitUntil("edge2 completes the first set", parkWithin, w.done)
	res.releasedUp = released()

	r.m.Track("edge2 stopped (parked)", "", 0, nil)
	if err := env.ls.Stop("edge2"); err != nil {
		r.Fatal(err)
	}
	res.parked = r.parkSet(env, "park_parked", away, payload, "edge2 parked")

	r.m.Track("edge2 started again", "", 0, nil)
	ready := r.startBox(env, "edge2")
	w = env.watchComplete(away, n, "edge2")
	r.m.Track("edge2 back: completes what it missed", "events", int64(n), w.count)
	ph := r.begin("park_catchup")
	env.waitUntil("edge2 catches up", parkWithin, w.done)
	res.catchup = time.Since(ready)
	row := ph.end("park_catchup", "edge2 back after parked: ready -> it completed the set it missed [relay]", n, nil,
		"what its hub held, then what L1 sent again")
	row.dur = res.catchup
	r.rows = append(r.rows, row)

	res.released, res.resent = released(), benchMetric(l1, "leafline_completion_resent_total", map[string]string{"edge": "edge2"})
	r.m.Track("every event complete for both edges, once", "", 0, nil)
	res.lost = env.incomplete(up, n, "edge1", "edge2") + env.incomplete(away, n, "edge1", "edge2")
	res.duplicates = max(0, int(env.applied()-base)-4*n)
	r.parks = append(r.parks, res)
}

// parkSet publishes ParkEvents events at L1, ids id, and returns the time
// from the publish until edge1 has completed each, as row key.
func (r *run) parkSet(env *benchEnv, key string, id func(int) string, payload []byte, label string) time.Duration {
	n := r.o.ParkEvents
	w := env.watchComplete(id, n, "edge1")
	r.m.Track(label+": published -> completed by edge1", "events", int64(n), w.count)
	ph := r.begin(key)
	start := time.Now()
	at, ok := r.publishUntil(env, n, payload, "k", id, parkWithin, w.done)
	if !ok {
		r.Fatalf("bench: edge1 did not complete %d events within %s (%s)", n, parkWithin, label)
	}
	row := ph.end(key, fmt.Sprintf("%s: publish -> edge1 completed each at L1 [relay]", label), n, nil,
		fmt.Sprintf("%d B events, hub streams %d MiB", r.o.ParkSize, r.o.ParkStreamMiB))
	row.dur = at.Sub(start)
	r.rows = append(r.rows, row)
	return row.dur
}

// parkFigures prints park's result and returns its figures: edge1's
// rates with both edges up and with edge2 parked, their ratio (1 when a
// parked edge costs the others nothing), what the hub released and L1
// sent again, edge2's catch-up, and the events lost or applied twice.
func (r *run) parkFigures() []Figure {
	if len(r.parks) == 0 {
		return nil
	}
	x := r.parks[0]
	both := float64(x.n) / x.both.Seconds()
	parked := float64(x.n) / x.parked.Seconds()
	fmt.Fprintf(r.out, "park: %d events of %d B a set, hub streams %d MiB: edge1 completed %.0f/s with both edges up, %.0f/s with edge2 parked (ratio %.3f); the hub released %.0f of edge2's events (%.0f while it was up), L1 sent it %.0f again; edge2 caught up in %s; %d lost, %d applied twice\n",
		x.n, x.size, x.streamBytes>>20, both, parked, parked/both, x.released, x.releasedUp, x.resent, x.catchup.Round(time.Millisecond), x.lost, x.duplicates)
	return []Figure{
		{"park_edge1_rate_both", both}, {"park_edge1_rate_parked", parked}, {"park_ratio", parked / both},
		{"park_released", x.released}, {"park_resent", x.resent}, {"park_catchup_s", x.catchup.Seconds()},
		{"park_lost", float64(x.lost)}, {"park_duplicate_completions", float64(x.duplicates)},
	}
}
