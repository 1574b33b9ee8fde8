//go:build linux

package bench

import (
	"fmt"
	"sync"
	"time"

	"github.com/leafline/leafline/publish"
)

// drainAndE2E runs f and e over one transport, on a system of l1, a hub
// and one edge (edge1, store sink).
func (r *run) drainAndE2E(transport string) {
	o := r.o
	if o.on("f") {
		r.m.Phase("f drain [" + transport + "]")
	} else {
		r.m.Phase("e end to end [" + transport + "]")
	}
	r.m.Track("start l1, a hub and an edge", "", 0, nil)
	env := newBenchEnv(r.tb, r.TempDir(), 1, map[string]string{"edge1": "events.*.d.>"}, nil, transport)
	defer env.close()
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })
	res := feRows{transport: transport}
	if o.on("f") {
		r.preload(env, o.Drain, func(i int) string { return fmt.Sprintf("events.x.d.%d", i%8) }, "d",
			map[string]int{"edge1": o.Drain}, false)
		res.f = r.drain(env, &res)
	} else {
		env.restart("always")
		env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })
		env.open("edge1")
	}
	if o.on("e") {
		if o.on("f") {
			r.m.Phase("e end to end [" + transport + "]")
		}
		res.e = r.endToEnd(env, &res)
	}
	r.fe = append(r.fe, res)
}

// drain is f: the edge's runner processes its backlog while its link is
// cut (row d3), then the link is restored and the receipts are timed until
// every one is completed at L1.
func (r *run) drain(env *benchEnv, res *feRows) benchRow {
	D, t := r.o.Drain, res.transport
	// Every receipt is in RE once the runner has ACKed its event; the
	// note says so, so that a drain that waits can be told from a
	// receipt that never reached RE.
	re0 := env.count("edge1", "RE")()
	d3 := r.runRunner(env, "d3", "leafline runner, store sink, link cut ["+t+"]", "edge1", D, "builds the receipt backlog for f")
	d3.note += fmt.Sprintf("; RE stored %d", env.count("edge1", "RE")()-re0)
	r.rows = append(r.rows, d3)
	base := env.applied()
	res.tl = benchWatch(
		benchGauge{"RE@edge1 (receipt messages)", env.count("edge1", "RE")},
		benchGauge{"RH@hub (receipt messages, from RE)", env.count("hub", "RH")},
		benchGauge{"R1@l1 (receipt messages, from RH)", env.count("l1", "R1")},
		benchGauge{"completions applied at L1", env.applied},
	)
	r.m.Track("link restored, receipts to L1", "events completed", int64(D), func() int64 { return int64(env.applied() - base) })
	ph := r.begin("f_drain")
	env.ls.Links["edge1"].Restore()
	env.waitUntil("drain", 30*time.Minute, func() bool { return env.applied() >= base+uint64(D) })
	row := ph.end("f", "drain: receipts backlog, link restore -> completed ["+t+"]", D, nil, "")
	res.tl.stop()
	r.rows = append(r.rows, row)
	return row
}

// endToEnd is e: events published at L1 until each is completed at L1.
func (r *run) endToEnd(env *benchEnv, res *feRows) benchRow {
	E := r.o.E2E
	at := make([]time.Time, E)
	base := env.applied()
	res.tl2 = benchWatch(
		benchGauge{"L1A@l1 (published)", env.count("l1", "L1A")},
		benchGauge{"HA@hub", env.count("hub", "HA")},
		benchGauge{"L2A@edge1", env.count("edge1", "L2A")},
		benchGauge{"runner ACKs edge1", func() uint64 { return uint64(env.traces["edge1"].acks.Load()) }},
		benchGauge{"RE@edge1 (receipt messages)", env.count("edge1", "RE")},
		benchGauge{"RH@hub", env.count("hub", "RH")},
		benchGauge{"R1@l1", env.count("l1", "R1")},
		benchGauge{"completions applied at L1", env.applied},
	)
	r.m.Track("published at L1 -> completed at L1", "events completed", int64(E), func() int64 { return int64(env.applied() - base) })
	ph := r.begin("e_e2e")
	var pubErr error
	var pubDur time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		s := time.Now()
		pubErr = benchPublishBatched(r.ctx, env.js["l1"], E, r.payload, func(i int) string { return fmt.Sprintf("events.e.d.%d", i%8) }, r.id("e"), at)
		pubDur = time.Since(s)
	})
	env.waitUntil("end to end", 30*time.Minute, func() bool { return env.applied() >= base+uint64(E) })
	wg.Wait()
	if pubErr != nil {
		r.Fatal(pubErr)
	}
	row := ph.end("e", "end to end: publish at L1 -> completed at L1 ["+res.transport+"]", E, nil,
		fmt.Sprintf("published in atomic batches of %d in %.1fs", publish.DefaultBatch, pubDur.Seconds()))
	res.tl2.stop()
	row.lat = benchE2ELatency(r.tb, env, at, "edge1")
	r.rows = append(r.rows, row)
	return row
}
