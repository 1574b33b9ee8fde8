//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/topology"
)

// sitesWithin bounds each of sites' waits.
const sitesWithin = 2 * time.Minute

// sitesRes is what sites measured.
type sitesRes struct {
	// reload is the longest reload of L1 and the hub, each time the
	// topology changed.
	reload time.Duration
	// firstEvent is from the added edge's ready until L1 recorded its
	// first completion; retired from the reloads that retired it until
	// every event pending for it was closed at L1.
	firstEvent, retired time.Duration
	// linkDrops counts the reloads during which the hub's link to edge1
	// dropped; held the consumers the hub kept for the retired edge.
	linkDrops, held int
	pending         int // events pending for the edge when it was retired
}

// sites is the phase sites: a system of l1, a hub and two edges over the
// relay, started without edge2 in the topology. edge2 is added: L1 and
// the hub reload the topology that has it, edge2 starts, and the time
// from its ready until L1 records its first completion is taken, while
// events are published at Rate a second. Then edge2 is stopped,
// SitesPending events are published (pending for it), and it is retired:
// L1 and the hub reload the topology that says so, and the time until L1
// has closed every one of them is taken. The hub's link to edge1 must
// stay up through every reload, and the hub must hold no consumer for the
// retired edge.
func (r *run) sites() {
	r.m.Phase("sites added and retired [relay]")
	r.m.Track("start l1, a hub and edge1", "", 0, nil)
	env := newBenchEnv(r.tb, r.TempDir(), 2, nil, nil, topology.TransportRelay)
	defer env.close()
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = "always"
	}
	full := map[string]*topology.Config{}
	for _, name := range []string{"l1", "hub", "edge1"} {
		full[name] = env.ls.Configs[name]
		env.ls.Configs[name] = r.configWith(full[name], func(t *topology.Topology) {
			t.Sites = slices.DeleteFunc(t.Sites, func(s topology.Site) bool { return s.Name == "edge2" })
		})
	}
	env.startSites("l1", "hub", "edge1")
	env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })
	env.open("edge1")
	var res sitesRes
	link := env.leafID("edge1")

	r.m.Track("edge2 added: L1 and the hub reload", "", 0, nil)
	res.reload = max(r.reloadBox(env, "l1", full["l1"]), r.reloadBox(env, "hub", full["hub"]))
	env.startSites("edge2")
	ready := time.Now()
	env.open("edge2")
	ph := r.begin("sites_added")
	steady := r.startSteady(env.js["l1"], "events.sites.added", r.id("sa"))
	svc := leafline.Completions(env.ls.App("l1"))
	first := func() bool { return svc.LastReceipts()["edge2"].After(ready) }
	if !env.waitFor(sitesWithin, first) {
		r.Fatalf("bench: the added edge completed nothing within %s", sitesWithin)
	}
	res.firstEvent = time.Since(ready)
	if _, err := steady.halt(); err != nil {
		r.Fatal(err)
	}
	row := ph.end("sites_added", "edge added to a running hub: its ready -> its first completion at L1 [relay]", 1, nil, "L1 and the hub reloaded")
	row.dur = res.firstEvent
	r.rows = append(r.rows, row)
	if env.leafID("edge1") != link {
		res.linkDrops++
	}

	r.m.Track("edge2 retired: L1 and the hub reload", "", 0, nil)
	if err := env.ls.Stop("edge2"); err != nil {
		r.Fatal(err)
	}
	res.pending = r.o.SitesPending
	ids := r.id("sr")
	r.publishUntil(env, res.pending, r.payload, "sites", ids, sitesWithin, env.watchComplete(ids, res.pending, "edge1").done)
	link = env.leafID("edge1")
	retire := func(t *topology.Topology) { s, _ := t.Site("edge2"); s.Retired = true }
	ph = r.begin("sites_retired")
	start := time.Now()
	res.reload = max(res.reload, r.reloadBox(env, "l1", r.configWith(full["l1"], retire)), r.reloadBox(env, "hub", r.configWith(full["hub"], retire)))
	if !env.waitFor(sitesWithin, func() bool { return env.retiredAll(ids, res.pending, "edge2") }) {
		r.Fatalf("bench: the events pending for the retired edge were not closed within %s", sitesWithin)
	}
	res.retired = time.Since(start)
	row = ph.end("sites_retired", "edge retired: the reloads -> every event pending for it closed at L1 [relay]", res.pending, nil, "status retired")
	row.dur = res.retired
	r.rows = append(r.rows, row)
	if env.leafID("edge1") != link {
		res.linkDrops++
	}
	res.held = env.consumersOf("hub", "HA", "edge2")
	r.siteRuns = append(r.siteRuns, res)
}

// configWith is a copy of c with a copy of its topology changed by change.
func (r *run) configWith(c *topology.Config, change func(*topology.Topology)) *topology.Config {
	b, err := json.Marshal(c.Topology)
	if err != nil {
		r.Fatal(err)
	}
	t, err := topology.ParseTopology(b, "bench")
	if err != nil {
		r.Fatal(err)
	}
	change(t)
	out := *c
	out.Topology = t
	return &out
}

// reloadBox makes site's running box take cfg, and returns how long it took.
func (r *run) reloadBox(env *benchEnv, site string, cfg *topology.Config) time.Duration {
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	start := time.Now()
	if err := env.ls.App(site).Reload(ctx, cfg); err != nil {
		r.Fatalf("bench: reload %s: %v", site, err)
	}
	env.ls.Configs[site] = cfg
	return time.Since(start)
}

// leafID is the id of the hub's leafnode connection from site (0: none).
func (env *benchEnv) leafID(site string) uint64 {
	lz, err := env.ls.App("hub").Server().Leafz(nil)
	if err != nil {
		return 0
	}
	for _, l := range lz.Leafs {
		if l.Name == site {
			return l.ID
		}
	}
	return 0
}

// retiredAll reports whether each event id(0) to id(n-1) is closed at L1 for
// site with the status retired.
func (env *benchEnv) retiredAll(id func(int) string, n int, site string) bool {
	st := leafline.Completions(env.ls.App("l1")).State()
	if st == nil {
		return false
	}
	for i := range n {
		c, err := st.Get(env.b.ctx, id(i))
		if err != nil || c.Processors[site].Status != record.StatusRetired {
			return false
		}
	}
	return true
}

// consumersOf counts the consumers of site's links on box's stream.
func (env *benchEnv) consumersOf(box, stream, site string) int {
	s, err := env.js[box].Stream(env.b.ctx, stream)
	if err != nil {
		return -1
	}
	n := 0
	for _, name := range []string{topology.RelayConsumerName(site), topology.SourceConsumerName(site)} {
		if _, err := s.Consumer(env.b.ctx, name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			n++
		}
	}
	return n
}

// sitesFigures prints sites' result and returns its figures.
func (r *run) sitesFigures() []Figure {
	if len(r.siteRuns) == 0 {
		return nil
	}
	x := r.siteRuns[0]
	fmt.Fprintf(r.out, "sites: an edge added took its first event %s after its ready; %d events pending for an edge retired were closed %s after the reloads; reloads took %s at most; the hub's link to edge1 dropped %d times; the hub kept %d consumers of the retired edge\n",
		x.firstEvent.Round(time.Millisecond), x.pending, x.retired.Round(time.Millisecond), x.reload.Round(time.Millisecond), x.linkDrops, x.held)
	return []Figure{
		{"sites_added_first_ms", float64(x.firstEvent.Milliseconds())}, {"sites_retired_ms", float64(x.retired.Milliseconds())},
		{"sites_reload_ms", float64(x.reload.Milliseconds())}, {"sites_link_drops", float64(x.linkDrops)},
		{"sites_retired_held", float64(x.held)},
	}
}
