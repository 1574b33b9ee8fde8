//go:build linux

package bench

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/leafline/leafline/topology"
)

// L1's redrive in replace: an event a changed box lost is published again
// once it is replaceOverdueAfter old and pending replaceRedriveAfter,
// which must exceed both duplicate windows (replaceDuplicateWindow for
// the origin stream, the receipts' default 10s), or the copy and the
// receipt it brings would be dropped as duplicates.
const (
	replaceDuplicateWindow = 5 * time.Second
	replaceOverdueAfter    = 15 * time.Second
	replaceRedriveAfter    = 30 * time.Second
)

// replaceAfterWithin bounds the wait for a case's "after" events, and
// replaceBeforeWithin the wait, once they are complete, for the events
// published before the change.
const (
	replaceAfterWithin  = 5 * time.Minute
	replaceBeforeWithin = 3 * time.Minute
)

// replaceCase is one change replace makes to a box: its data dir wiped
// (replaced), or restored from a copy taken earlier (rolled back).
type replaceCase struct {
	name, site string
	rollback   bool
}

// replaceCases are replace's cases, in the order they run on one system.
var replaceCases = []replaceCase{
	{"edge", "edge1", false}, {"hub", "hub", false},
	{"edge_rollback", "edge1", true}, {"hub_rollback", "hub", true},
}

// replaceRes is what replace measured.
type replaceRes struct {
	// after is each case's time from the changed box's ready until every
	// event published after it was complete at L1 for both edges
	// (replaceAfterWithin when they were not).
	after map[string]time.Duration
	// lost counts the events of every case not complete for both edges
	// at the end; duplicates the receipts L1 applied beyond one per
	// event and edge; changes the upstream changes the relay links
	// detected (leafline_link_upstream_changes_total, over every box).
	lost, duplicates int
	changes          float64
}

// changeTally sums a counter over the boxes of a system whose boxes
// restart: a restarted box counts from zero again.
type changeTally struct {
	last  map[string]float64
	total float64
}

// observe adds what each running box counted since the last observe.
func (t *changeTally) observe(env *benchEnv) {
	for _, s := range env.ls.Topology.Sites {
		if app := env.ls.App(s.Name); app != nil {
			v := benchMetricSum(app, "leafline_link_upstream_changes_total")
			t.total += max(0, v-t.last[s.Name])
			t.last[s.Name] = v
		}
	}
}

// replace is the phase replace: a system of l1, a hub and two edges over
// the relay, and replaceCases run on it one after the other (see
// replaceOne); then every event of every case must be complete for both
// edges, each receipt applied once.
func (r *run) replace() {
	r.m.Phase("replace boxes replaced and rolled back [relay]")
	r.m.Track("start l1, a hub and two edges", "", 0, nil)
	env := newBenchEnv(r.tb, r.TempDir(), 2, nil, nil, topology.TransportRelay)
	defer env.close()
	env.ls.Topology.Events.DuplicateWindow = topology.Duration(replaceDuplicateWindow)
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = "always"
	}
	co := &env.ls.Configs["l1"].Completion
	co.OverdueAfter, co.RedriveAfter = topology.Duration(replaceOverdueAfter), topology.Duration(replaceRedriveAfter)
	env.startOpen()
	res := replaceRes{after: map[string]time.Duration{}}
	tally := &changeTally{last: map[string]float64{}}
	base := env.applied()
	var ids []func(int) string
	for k, c := range replaceCases {
		before, after := r.id(fmt.Sprintf("rb%d", k)), r.id(fmt.Sprintf("ra%d", k))
		res.after[c.name] = r.replaceOne(env, c, tally, before, after)
		ids = append(ids, before, after)
	}
	r.m.Track("every event complete for both edges, once", "", 0, nil)
	o := r.o
	for k, id := range ids {
		n := o.ReplaceBefore
		if k%2 == 1 {
			n = o.ReplaceAfter
		}
		res.lost += env.incomplete(id, n, "edge1", "edge2")
	}
	res.duplicates = max(0, int(env.applied()-base)-2*len(replaceCases)*(o.ReplaceBefore+o.ReplaceAfter))
	tally.observe(env)
	res.changes = tally.total
	r.replaces = append(r.replaces, res)
}

// replaceOne runs case c: ReplaceBefore events completed at L1 (with a
// rollback, after a copy of the box's data dir is taken), the box stopped,
// its data dir wiped or restored from the copy, and the box started; then
// ReplaceAfter events published and timed from its ready until each is
// complete at L1 for both edges, and the events before waited for, up to
// replaceBeforeWithin. It returns the time of the events after.
func (r *run) replaceOne(env *benchEnv, c replaceCase, tally *changeTally, before, after func(int) string) time.Duration {
	o := r.o
	kind := "replaced (data dir wiped)"
	change := r.wipeDir
	if c.rollback {
		kind = "rolled back (data dir restored)"
		copied := filepath.Join(r.TempDir(), c.site)
		tally.observe(env)
		r.m.Track(c.site+": copy of its data dir", "", 0, nil)
		r.restartBox(env, c.site, func(dir string) { r.copyDir(dir, copied) })
		tally.last[c.site] = 0
		change = func(dir string) { r.restoreDir(dir, copied) }
	}
	w := env.watchComplete(before, o.ReplaceBefore, "edge1", "edge2")
	r.m.Track(c.site+": events before the change", "events", int64(o.ReplaceBefore), w.count)
	if _, ok := r.publishUntil(env, o.ReplaceBefore, r.payload, "rb", before, 10*time.Minute, w.done); !ok {
		r.Fatalf("bench: replace %s: the events before the change not complete within 10m", c.name)
	}
	tally.observe(env)
	r.m.Track(c.site+" "+kind, "", 0, nil)
	changes := tally.total
	ready := r.restartBox(env, c.site, change)
	tally.last[c.site] = 0
	w = env.watchComplete(after, o.ReplaceAfter, "edge1", "edge2")
	r.m.Track(c.site+" back: events after it", "events", int64(o.ReplaceAfter), w.count)
	ph := r.begin("replace_" + c.name)
	at, ok := r.publishUntil(env, o.ReplaceAfter, r.payload, "ra", after, replaceAfterWithin, w.done)
	took := at.Sub(ready)
	note := "ready -> every event after complete for both edges"
	if !ok {
		note = fmt.Sprintf("NOT every event after complete within %s", replaceAfterWithin)
	}
	row := ph.end("replace_"+c.name, fmt.Sprintf("%s %s [relay]", c.site, kind), o.ReplaceAfter, nil, "")
	row.dur = took
	if !env.waitFor(replaceBeforeWithin, env.watchComplete(before, o.ReplaceBefore, "edge1", "edge2").done) {
		note += fmt.Sprintf("; events before NOT all complete within %s", replaceBeforeWithin)
	}
	tally.observe(env)
	row.note = fmt.Sprintf("%s; %.0f upstream changes detected", note, tally.total-changes)
	r.rows = append(r.rows, row)
	return took
}

// replaceFigures prints replace's result and returns its figures: each
// case's time from the box's ready until the events after were complete,
// the events lost or applied twice, and the upstream changes detected.
func (r *run) replaceFigures() []Figure {
	if len(r.replaces) == 0 {
		return nil
	}
	x := r.replaces[0]
	var figs []Figure
	fmt.Fprintf(r.out, "replace: from the box's ready to every event after complete at L1:")
	for _, c := range replaceCases {
		d := x.after[c.name]
		fmt.Fprintf(r.out, " %s %s", c.name, d.Round(time.Millisecond))
		figs = append(figs, Figure{"replace_" + c.name + "_after_ms", float64(d.Milliseconds())})
	}
	fmt.Fprintf(r.out, "; %d lost, %d applied twice, %.0f upstream changes detected\n", x.lost, x.duplicates, x.changes)
	return append(figs, Figure{"replace_lost", float64(x.lost)}, Figure{"replace_duplicate_completions", float64(x.duplicates)},
		Figure{"replace_upstream_changes", x.changes})
}
