//go:build linux

package bench

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafline/leafline/topology"
)

// fleetRes is what F measured over one transport.
type fleetRes struct {
	transport string
	row       benchRow
	stalls    int64
	// parked is the same drain with the last edge stopped for the whole
	// run, timed until every other edge's events are complete (n 0 with
	// fewer than 2 edges); again is the first drain once more after it,
	// the parked edge back and caught up, so that the parked drain is
	// compared with one before and one after it on the same system.
	// stalls and parkedStalls are the stall warnings logged during each,
	// from its cut to its drain's end.
	parked, again benchRow
	parkedStalls  int64
}

// fleet is F over one transport: one hub and FleetEdges edges, each
// receiving FleetEvents events published while every edge link is cut
// (row F); then, with 2 edges or more, the same on the same system with
// the last edge stopped for the whole run (row F_parked), and once more
// with every edge up after the parked one has caught up (row F_again).
func (r *run) fleet(transport string) {
	r.m.Phase("F fleet [" + transport + "]")
	env, stalls := r.fleetSystem(transport)
	defer env.close()
	edges := env.ls.Topology.Edges()
	for _, e := range edges {
		env.open(e.Name)
	}
	res := fleetRes{transport: transport}
	res.row, res.stalls = r.fleetDrain(env, "F", edges, stalls, transport)
	if len(edges) >= 2 {
		parked := edges[len(edges)-1].Name
		r.m.Track(parked+" stopped (parked)", "", 0, nil)
		if err := env.ls.Stop(parked); err != nil {
			r.Fatal(err)
		}
		res.parked, res.parkedStalls = r.fleetDrain(env, "F_parked", edges[:len(edges)-1], stalls, transport)
		r.m.Track(parked+" started again: completes what it missed", "events", int64(r.o.FleetEvents), nil)
		want := env.applied() + uint64(r.o.FleetEvents)
		r.startBox(env, parked)
		env.waitUntil(parked+" catches up", 30*time.Minute, func() bool { return env.applied() >= want })
		res.again, _ = r.fleetDrain(env, "F_again", edges, stalls, transport)
	}
	r.fleets = append(r.fleets, res)
}

// fleetSystem starts F's system over transport, SyncAlways, and waits
// until every link is up; its boxes count the stall warnings they log.
func (r *run) fleetSystem(transport string) (*benchEnv, *atomic.Int64) {
	n := r.o.FleetEdges
	filters := map[string]string{}
	for i := 1; i <= n; i++ {
		filters[fmt.Sprintf("edge%d", i)] = fmt.Sprintf("events.F.edge%d.>", i)
	}
	log, stalls := newStallLogger()
	t0 := time.Now()
	env := newBenchEnvLog(r.tb, r.TempDir(), n, filters, nil, transport, log)
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = "always"
	}
	env.startAll()
	up := func() int64 {
		var k int64
		for _, s := range env.ls.Topology.Sites[1:] {
			if env.connected(s.Name)() {
				k++
			}
		}
		return k
	}
	r.m.Track("edges linked", "sites", int64(n+1), up)
	env.waitUntil("links", 10*time.Minute, func() bool { return up() == int64(n+1) })
	fmt.Fprintf(r.out, "bench: fleet [%s]: %d edges started and linked in %.1fs\n", transport, n, time.Since(t0).Seconds())
	return env, stalls
}

// fleetDrain cuts the links of the edges active, publishes FleetEvents
// events at L1 for each edge of the fleet (a stopped edge's stay at the
// hub), keeps the links cut for FleetCut (the publish counts in it), then
// restores them all at once and times the drain until every event of the
// active edges is completed at L1: row key, and the stall warnings logged
// meanwhile.
func (r *run) fleetDrain(env *benchEnv, key string, active []*topology.Site, stalls *atomic.Int64, transport string) (benchRow, int64) {
	o := r.o
	n, k := o.FleetEdges, o.FleetEvents
	for _, e := range active {
		env.ls.Links[e.Name].Cut()
	}
	cut, total, want := time.Now(), n*k, len(active)*k
	base, stalls0 := env.applied(), stalls.Load()
	ha := env.count("hub", "HA")
	r.m.Track("links cut, published to the hub", "events", int64(total), since(ha))
	ha0 := ha()
	if err := benchPublish(r.ctx, env.js["l1"], total, r.payload,
		func(i int) string { return fmt.Sprintf("events.F.edge%d.%d", i%n+1, i%8) }, r.id(key), nil); err != nil {
		r.Fatal(err)
	}
	env.waitUntil("the hub holds the fleet's events", 30*time.Minute, func() bool { return ha() >= ha0+uint64(total) })
	held := time.Since(cut)
	r.m.Waiting("links cut", o.FleetCut-held)
	r.sleep(o.FleetCut - held)
	var wg sync.WaitGroup
	r.m.Track("links restored, drain", "events completed", int64(want), func() int64 { return int64(env.applied() - base) })
	ph := r.begin(key + "_fleet")
	for _, e := range active {
		wg.Go(env.ls.Links[e.Name].Restore)
	}
	wg.Wait()
	env.waitUntil("the fleet's drain", 60*time.Minute, func() bool { return env.applied() >= base+uint64(want) })
	what := fmt.Sprintf("fleet: %d edges, common cut %s, restore -> all completed [%s]", n, max(o.FleetCut, held).Round(time.Second), transport)
	if len(active) < n {
		what = fmt.Sprintf("fleet: %d edges, %d parked, cut %s, restore -> the others' completed [%s]", n, n-len(active), max(o.FleetCut, held).Round(time.Second), transport)
	}
	n0 := stalls.Load() - stalls0
	row := ph.end(key, what, want, nil, fmt.Sprintf("cpu_s/1k: the whole process (hub, edges, l1); %d stall warnings", n0))
	r.rows = append(r.rows, row)
	return row, n0
}

// transportSuffix is "" with one transport, else _<t>: the suffix of the
// figures of the phases run per transport.
func (r *run) transportSuffix(t string) string {
	if len(r.o.Transports) > 1 {
		return "_" + t
	}
	return ""
}

// fleetFigures are the figures of F per transport: the drain, its CPU and
// disk flushes per receipt and its stall warnings; with a parked run, its
// drain and fleet_parked_ratio, the mean of the drains with every edge up
// (before and after) over the drain with one parked (1 or more when a
// parked edge costs the others nothing).
func (r *run) fleetFigures() []Figure {
	var figs []Figure
	for _, x := range r.fleets {
		s := r.transportSuffix(x.transport)
		figs = append(figs, Figure{"fleet_drain_s" + s, x.row.dur.Seconds()},
			Figure{"fleet_cpu_s_per_1k" + s, x.row.cpu.Seconds() / float64(x.row.n) * 1000})
		if x.row.flushes >= 0 {
			figs = append(figs, Figure{"fleet_flushes_per_receipt" + s, float64(x.row.flushes) / float64(x.row.n)})
		}
		figs = append(figs, Figure{"fleet_stalls" + s, float64(x.stalls)})
		if x.parked.n > 0 {
			up := (x.row.dur.Seconds() + x.again.dur.Seconds()) / 2
			ratio := up / x.parked.dur.Seconds()
			fmt.Fprintf(r.out, "fleet [%s]: drain with every edge up %s and %s again, with one parked %s (the others' events only): ratio %.3f\n",
				x.transport, x.row.dur.Round(time.Millisecond), x.again.dur.Round(time.Millisecond), x.parked.dur.Round(time.Millisecond), ratio)
			figs = append(figs, Figure{"fleet_parked_drain_s" + s, x.parked.dur.Seconds()},
				Figure{"fleet_again_drain_s" + s, x.again.dur.Seconds()}, Figure{"fleet_parked_ratio" + s, ratio})
		}
	}
	return figs
}
