//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafline/leafline/cmd/leafline/internal/bench/meter"
)

// tb is one Leafline run's context for its phases: options, temporary
// directories and cleanups. Fatal ends the run: Leafline recovers it and
// returns the error, after the cleanups.
type tb struct {
	ctx     context.Context
	o       Options
	m       *meter.Meter // nil without Options.Progress
	dir     string
	n       int
	stopped atomic.Bool // the run was stopped: no new directory

	mu       sync.Mutex
	cleanups []func()
}

// fatalError is what Fatal panics with.
type fatalError struct{ err error }

func (b *tb) Fatal(args ...any) { panic(fatalError{errors.New(fmt.Sprint(args...))}) }

func (b *tb) Fatalf(format string, args ...any) { panic(fatalError{fmt.Errorf(format, args...)}) }

// TempDir is a new directory under the run's directory.
func (b *tb) TempDir() string {
	if b.stopped.Load() {
		b.Fatal("bench: stopped")
	}
	b.n++
	d := fmt.Sprintf("%s/%d", b.dir, b.n)
	if err := os.MkdirAll(d, 0o700); err != nil {
		b.Fatal(err)
	}
	return d
}

// Cleanup runs f when the run ends, the last added first. Each f runs
// once, from the phase or from Leafline stopping it.
func (b *tb) Cleanup(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cleanups = append(b.cleanups, f)
}

// sleep waits d, or until the run's context ends, which ends the phase.
func (b *tb) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.ctx.Done():
		b.Fatal("bench: stopped: ", context.Cause(b.ctx))
	}
}

// runCleanups runs the cleanups added so far, the last added first, and
// forgets them.
func (b *tb) runCleanups() {
	b.mu.Lock()
	fs := b.cleanups
	b.cleanups = nil
	b.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// Stopping a run: when ctx ends, Leafline gives the phase in progress
// stopGrace to notice (its waits and publishes watch ctx) and return
// through its cleanups. A phase still running then has its systems closed
// under it (the cleanups, for at most stopCleanup) and its directory
// removed; Leafline returns ctx's error within stopGrace + stopCleanup +
// stopRemove, under the 5 s a user waits after Ctrl-C or SIGTERM. The
// phase's goroutine may go on until the process exits, which the command
// then does.
const (
	stopGrace   = 1500 * time.Millisecond
	stopCleanup = 2 * time.Second
	stopRemove  = 500 * time.Millisecond
)

// run is one Leafline run: the rows so far and what the report needs.
type run struct {
	*tb
	out        io.Writer
	payload    []byte
	rows       []benchRow
	breakdowns []string
	dStore     benchRow
	dFile      benchRow
	fe         []feRows
	restore    []restoreRes
	fleets     []fleetRes
	rss        *benchRow
	l1         *l1Res
	wires      []wireRes
	caps       []capRes
	expiries   []expiryRes
	priorities []priorityRes
	parks      []parkRes
	replaces   []replaceRes
	siteRuns   []sitesRes
	memories   []memRun
	origins    []originResult
}

// feRows are the drain and end-to-end rows of one transport.
type feRows struct {
	transport string
	f, e      benchRow
	tl, tl2   *benchTimeline
}

// Leafline runs the phases of o on this machine, writes the banner, the
// table and the final `bench …` line to o.Out, and returns the line's
// figures; with o.Progress, each phase's progress line goes there. A
// failed phase ends the run with its error.
//
// When ctx ends (Ctrl-C, SIGTERM in the command), Leafline stops the phase
// in progress, closes its servers and removes the directory it made, and
// returns ctx's error within 5 s (see stopGrace).
func Leafline(ctx context.Context, o Options) (figs []Figure, err error) {
	o.setDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	dir, made := o.Dir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "leafline-bench-*"); err != nil {
			return nil, err
		}
		made = true
	}
	m := meter.New(o.Progress)
	defer m.Close()
	o.Out = m.Out(o.Out)
	r := &run{tb: &tb{ctx: ctx, o: o, dir: dir, m: m}, out: o.Out, payload: benchPayload(o.Size)}
	type result struct {
		figs []Figure
		err  error
	}
	done := make(chan result, 1)
	go func() {
		figs, err := r.phases()
		done <- result{figs, err}
	}()
	select {
	case res := <-done:
		if made {
			os.RemoveAll(dir)
		}
		return res.figs, res.err
	case <-ctx.Done():
	}
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		r.stopped.Store(true)
		closed := make(chan struct{})
		go func() { defer close(closed); r.runCleanups() }()
		select {
		case <-closed:
		case <-time.After(stopCleanup):
		}
	}
	if made {
		removeAllWithin(dir, stopRemove)
	}
	return nil, fmt.Errorf("bench: stopped: %w", context.Cause(ctx))
}

// removeAllWithin removes dir, trying again until d has passed while a
// server being closed still writes into it.
func removeAllWithin(dir string, d time.Duration) {
	deadline := time.Now().Add(d)
	for os.RemoveAll(dir) != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// phases runs the phases of r.o, then the cleanups; a Fatal ends it with
// its error. Once the run is stopped, any panic of a phase whose systems
// were closed under it ends it quietly.
func (r *run) phases() (figs []Figure, err error) {
	o := r.o
	defer r.runCleanups()
	defer func() {
		if p := recover(); p != nil {
			fe, ok := p.(fatalError)
			switch {
			case ok:
				err = fe.err
			case r.stopped.Load() || r.ctx.Err() != nil:
				err = fmt.Errorf("bench: stopped: %v", p)
			default:
				panic(p)
			}
		}
	}()
	r.banner()
	r.standalone()
	if r.o.on("l1") {
		r.m.Phase("l1 L1 alone")
		r.l1Alone()
	}
	if r.anyOn("s", "a", "b", "c", "d") {
		r.system()
	}
	if r.anyOn("f", "e") {
		for _, t := range o.Transports {
			r.drainAndE2E(t)
		}
	}
	for _, t := range o.Transports {
		if r.o.on("l") {
			r.linkRestore(t)
		}
	}
	for _, t := range o.Transports {
		if r.o.on("F") {
			r.fleet(t)
		}
	}
	if r.o.on("wire") {
		r.wire(o.Transports[0])
	}
	if r.o.on("cap") {
		r.capLink()
	}
	if r.o.on("expiry") {
		r.expiry(o.Transports[0])
	}
	if r.o.on("priority") {
		r.priority()
	}
	if r.o.on("park") {
		r.park()
	}
	if r.o.on("replace") {
		r.replace()
	}
	if r.o.on("sites") {
		r.sites()
	}
	if r.o.on("memory") {
		r.memory()
	}
	if r.o.on("origin") {
		r.origin()
	}
	if r.o.on("r") {
		r.m.Phase("r edge process RSS")
		row := benchRSSRun(r.tb, o.RSS, r.payload)
		r.rss = &row
		r.rows = append(r.rows, row)
	}
	r.m.End()
	return r.report(), nil
}

func (r *run) anyOn(phases ...string) bool { return r.o.anyOn(phases...) }

func loadavg() string {
	l, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(l)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func (r *run) banner() {
	o := r.o
	fmt.Fprintf(r.out, "bench: leafline, GOMAXPROCS=%d, NumCPU=%d, loadavg at start %s\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), loadavg())
	fmt.Fprintf(r.out, "bench: phases=%s transports=%s backlog=%d size=%dB file=%d naive=%d drain=%d e2e=%d probe=%d rss=%d cuts=%dx%v rate=%d/s fleet=%dx%d cut %v park=%dx%dB hub streams %dMiB replace=%d+%d ids=%s; signed receipts=%t, mutual TLS links=%t, edge batch_size=%s backlog_batch_size=%s\n",
		strings.Join(o.Phases, ","), strings.Join(o.Transports, ","), o.Backlog, len(r.payload), o.File, o.Naive, o.Drain, o.E2E, o.Probe, o.RSS,
		o.Cuts, o.CutFor, o.Rate, o.FleetEdges, o.FleetEvents, o.FleetCut, o.ParkEvents, o.ParkSize, o.ParkStreamMiB, o.ReplaceBefore, o.ReplaceAfter,
		o.IDs, !o.Unsigned, !o.Insecure, setting(o.Batch), setting(o.BacklogBatch))
	fmt.Fprintln(r.out, o.estimateLine())
}

// setting prints a size option: "default" for 0.
func setting(n int) string {
	if n == 0 {
		return "default"
	}
	return fmt.Sprint(n)
}

// standalone runs the phases without servers (k, z).
func (r *run) standalone() {
	if r.o.on("k") {
		r.m.Phase("k receipt signing")
		r.rows = append(r.rows, benchSigning(r.tb, r.o.Backlog)...)
	}
	if r.o.on("z") {
		r.m.Phase("z disk fsync")
		r.m.Waiting("1 writer, then 16", 4*time.Second)
		r.rows = append(r.rows, benchDiskFlush(r.tb, 1), benchDiskFlush(r.tb, 16))
	}
}

// system runs s, a, b, c and d on one system of l1, a hub and two edges,
// preloaded first.
func (r *run) system() {
	o := r.o
	r.m.Phase("s-d setup: " + fmt.Sprint(o.Backlog) + " events preloaded")
	r.m.Track("start l1, hub, 2 edges", "", 0, nil)
	env := newBenchEnv(r.tb, r.TempDir(), 2,
		map[string]string{"edge1": "events.b.>", "edge2": "events.b.f.>"},
		map[string]string{"edge2": "file"}, o.Transports[0])
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool {
		return env.connected("hub")() && env.connected("edge1")() && env.connected("edge2")()
	})
	backlogSubj := func(i int) string {
		if i < o.File {
			return fmt.Sprintf("events.b.f.%d", i%8)
		}
		return fmt.Sprintf("events.b.s.%d", i%8)
	}
	r.preload(env, o.Backlog, backlogSubj, "b", map[string]int{"edge1": o.Backlog, "edge2": o.File}, true)
	if o.on("s") {
		r.m.Phase("s publish and sourcing")
		r.probe(env)
	}
	if o.on("a") {
		r.m.Phase("a raw consume")
		r.m.Track(fmt.Sprintf("Fetch+Ack, then iterator+Ack, %d events each", o.Backlog), "", 0, nil)
		r.rows = append(r.rows, benchRawConsume(r.tb, env, o.Backlog)...)
	}
	if o.on("b") {
		r.m.Phase("b receipt ceiling")
		r.m.Track(fmt.Sprintf("atomic batches of 256 and 1000, %d receipts each", o.Backlog), "", 0, nil)
		r.rows = append(r.rows, benchCeiling(r.tb, env, o.Backlog)...)
	}
	if o.on("c") {
		r.m.Phase("c naive loop")
		r.m.Track(fmt.Sprintf("%d events", o.Naive), "", 0, nil)
		r.rows = append(r.rows, benchNaiveLoop(r.tb, env, o.Naive))
	}
	if o.on("d") {
		r.m.Phase("d sink runner")
		r.dStore = r.runRunner(env, "d", "leafline runner, store sink, defaults (edge1)", "edge1", o.Backlog, "")
		r.dFile = r.runRunner(env, "d2", "leafline runner, file sink, defaults (edge2)", "edge2", o.File, "one file+fsync per event")
		r.rows = append(r.rows, r.dStore, r.dFile)
	}
	env.close()
}

// preload publishes n events at L1 with sync_interval 2m, lets them reach
// every edge (want: events per edge), then restarts every box with
// SyncAlways, the edge links cut. With rows, the setup steps are rows
// P1-P4.
func (r *run) preload(env *benchEnv, n int, subj func(int) string, prefix string, want map[string]int, rows bool) {
	ls, t0 := env.ls, time.Now()
	edges := env.ls.Topology.Edges()
	ls.Links["hub"].Cut()
	for _, e := range edges {
		ls.Links[e.Name].Cut()
	}
	add := func(row benchRow) {
		if rows {
			r.rows = append(r.rows, row)
		}
	}
	r.m.Track("preload: publish at L1", "events", int64(n), since(env.count("l1", "L1A")))
	ph := r.begin("preload_publish")
	if err := benchPublish(r.ctx, env.js["l1"], n, r.payload, subj, r.id(prefix), nil); err != nil {
		r.Fatal(err)
	}
	add(ph.end("P1", "setup: L1 publish async, sync 2m (not SyncAlways)", n, nil, ""))
	r.m.Track("preload: to the hub", "events", int64(n), since(env.count("hub", "HA")))
	ph = r.begin("preload_ha")
	ls.Links["hub"].Restore()
	env.waitUntil("HA filled", 10*time.Minute, func() bool { return env.count("hub", "HA")() >= uint64(n) })
	add(ph.end("P2", "setup: sourcing L1A->HA backlog, sync 2m", n, nil, ""))
	ph = r.begin("preload_l2a")
	total := 0
	var l2a []func() uint64
	for _, e := range edges {
		ls.Links[e.Name].Restore()
		total += want[e.Name]
		l2a = append(l2a, env.count(e.Name, "L2A"))
	}
	r.m.Track("preload: to the edges", "events", int64(total), since(func() (sum uint64) {
		for _, c := range l2a {
			sum += c()
		}
		return sum
	}))
	env.waitUntil("L2A filled", 10*time.Minute, func() bool {
		for _, e := range edges {
			if env.count(e.Name, "L2A")() < uint64(want[e.Name]) {
				return false
			}
		}
		return true
	})
	add(ph.end("P3", "setup: sourcing HA->L2A, sync 2m", total, nil, "msgs written in the edge servers"))
	r.m.Track("preload: L1's origin tracker", "events", int64(n), since(env.originDone))
	ph = r.begin("preload_origin")
	env.waitUntil("origin tracker", 30*time.Minute, func() bool { return env.originDone() >= uint64(n) })
	add(ph.end("P4", "setup: L1 origin tracker catches up, sync 2m", n, nil, "time after P3"))
	for _, e := range edges {
		ls.Links[e.Name].Cut()
	}
	r.m.Track("restart with SyncAlways", "", 0, nil)
	env.restart("always")
	env.waitUntil("hub link", time.Minute, env.connected("hub"))
	fmt.Fprintf(r.out, "bench: preloaded %d events in %.1fs; every box restarted with SyncAlways; edge links cut\n", n, time.Since(t0).Seconds())
}

// probe is s: publish at L1 and sourcing to the hub under SyncAlways.
func (r *run) probe(env *benchEnv) {
	ls, S := env.ls, r.o.Probe
	ls.Links["hub"].Cut()
	origin0 := env.originDone()
	ph3 := r.begin("s3_origin")
	r.m.Track("publish at L1", "events", int64(S), since(env.count("l1", "L1A")))
	ph := r.begin("s1_publish")
	if err := benchPublish(r.ctx, env.js["l1"], S, r.payload, func(i int) string { return fmt.Sprintf("events.p.%d", i%8) }, r.id("p"), nil); err != nil {
		r.Fatal(err)
	}
	r.rows = append(r.rows, ph.end("s1", "L1 publish async window 2048 (SyncAlways)", S, nil, "the producer's side"))
	haBefore := env.count("hub", "HA")()
	r.m.Track("sourcing to the hub", "events", int64(S), since(env.count("hub", "HA")))
	ph = r.begin("s2_sourcing")
	ls.Links["hub"].Restore()
	env.waitUntil("HA probe", 10*time.Minute, func() bool { return env.count("hub", "HA")() >= haBefore+uint64(S) })
	r.rows = append(r.rows, ph.end("s2", "sourcing L1A->HA backlog (SyncAlways)", S, nil, "durable source, 1 fsync per msg"))
	r.m.Track("L1's origin tracker", "events", int64(S), func() int64 { return int64(env.originDone() - origin0) })
	env.waitUntil("origin tracker", 30*time.Minute, func() bool { return env.originDone() >= origin0+uint64(S) })
	r.rows = append(r.rows, ph3.end("s3", "L1 origin tracker: KV records for S (SyncAlways)", S, nil, "from start of s1; rss/profile: s1"))
}

// runRunner opens edge's runner on its backlog of n events and times it
// until every one is ACKed; the batch breakdown goes to the report.
func (r *run) runRunner(env *benchEnv, key, what, edge string, n int, note string) benchRow {
	tr := env.traces[edge]
	box := env.ls.App(edge)
	const sinkH, pubH = "leafline_sink_write_seconds", "leafline_receipt_puback_seconds"
	sink0, sinkN0 := benchHist(box, sinkH)
	pub0, pubN0 := benchHist(box, pubH)
	r.m.Track(what, "events ACKed", int64(n), tr.acks.Load)
	ph := r.begin(key)
	env.open(edge)
	env.waitUntil(edge+" drained", 30*time.Minute, func() bool { return tr.acks.Load() >= int64(n) })
	row := ph.end(key, what, n, tr.latencies(), note)
	seg, batches, size, wall := tr.breakdown()
	sink1, sinkN1 := benchHist(box, sinkH)
	pub1, pubN1 := benchHist(box, pubH)
	msf := func(d time.Duration) float64 { return float64(d) / 1e6 }
	per := func(sum float64, n uint64) float64 {
		if n == 0 {
			return 0
		}
		return sum / float64(n) * 1000
	}
	r.breakdowns = append(r.breakdowns, fmt.Sprintf(
		"    %-3s %-7s batches=%d mean_batch=%.1f wall/batch=%.2fms | per-batch ms, overlapping: F fetch=%.2f Q wait=%.2f C commit=%.2f P publish=%.2f M mark=%.2f A acks=%.2f | metrics: sink/commit=%.2f puback=%.2f",
		key, edge, batches, size, msf(wall), msf(seg[0]), msf(seg[1]), msf(seg[2]), msf(seg[3]), msf(seg[4]), msf(seg[5]),
		per(sink1-sink0, sinkN1-sinkN0), per(pub1-pub0, pubN1-pubN0)))
	return row
}

// since returns a count from 0 at the call: what c has grown since.
func since(c func() uint64) func() int64 {
	c0 := c()
	return func() int64 { return int64(c() - c0) }
}
