//go:build linux

// The benchmark driver runs on Linux only: it reads the process's memory,
// CPU time and the disk's flush count from /proc and /sys.

package edge

// The leafline benchmark driver (issue 6). One command, one run, one machine,
// SyncAlways on every server for every measured phase:
//
//	go test ./edge -run '^$' -bench '^BenchmarkLeafline$' -benchtime 1x -timeout 60m
//
// Sizes and extras are flags after the package, e.g.
//
//	-leafline.backlog 200000 -leafline.rss 1000000 -leafline.profile /tmp/prof
//
// Phases, in order, in one process. First, without the system:
//
//	k  CPU cost of signing receipts (edge: per-call nkeys Sign, and the
//	   runner's receipts.Signer) and verifying them (L1);
//	z  the disk's fsync ceiling: 256-byte appends, each fsynced, by 1 and
//	   by 16 writers, each on a file of its own;
//	g  one hop edge -> hub for a receipts backlog on two standalone servers:
//	   durable sourcing as leafline configures it, then a forwarder sketch
//	   (cross-domain Fetch + atomic batch publish);
//	x  (only when named in -leafline.only) the outbox's bbolt cost per batch
//	   with random vs sequential keys, and a Seq-keyed layout sketch.
//
// Then one LocalSystem (l1, hub and three edges on loopback, LocalSystem's
// defaults: mutual TLS links, signed receipts; edge1 store sink, edge2 file
// sink, edge3 store sink):
//
//	P  preload with sync_interval 2m (setup only: the forward path under
//	   SyncAlways is itself a measured row), then every box restarts with
//	   SyncAlways and the edge links stay cut while a-d run;
//	s  L1 publish and L1A→HA sourcing ingest under SyncAlways;
//	a  raw consume of edge1's L2A backlog (durable pull consumer, Fetch+Ack);
//	b  receipt ceiling: atomic batch publish of receipts on edge1's server;
//	c  naive: per message Commit (store sink + outbox, one bbolt tx),
//	   synchronous receipt publish, MarkPublished, Ack;
//	d  the real runner, default config: store sink (edge1), file sink (edge2);
//	f  drain: edge3 processes its backlog while its link is cut, then the
//	   link is restored and the receipts are timed until all are completed
//	   at L1;
//	e  end to end: events published at L1 until completed at L1 (edge3);
//	r  peak RSS of an edge run as a separate `leafline run` process
//	   (SyncAlways) draining -leafline.rss events (0 skips it).
//
// After the table it prints the runner's per-batch time breakdown, the
// per-stage fill rates of (f) and (e), the ratios, what bounds (d) and (e)
// on this machine ("bounds:": the cores that (d)'s CPU per event allows,
// the disk flushes that (e) makes per event against (z)), and the final
// "bench leafline_eps=…" line. -leafline.profile DIR writes a CPU and a heap
// profile per phase.
//
// Latency, where it applies, is per event from the fetch of its batch (for
// the runner: the start of the Fetch that returned it) to its batch's last
// ACK; for (b) the batch publish time; for (e) publish at L1 to completion
// recorded at L1. CPU is getrusage(RUSAGE_SELF) of this process (every
// in-process server included); peak RSS is VmHWM, reset per phase through
// /proc/self/clear_refs, of this whole process. flush/ev is the cache
// flushes the disk under the temp dir completed per event during the row
// (/proc/diskstats: the disk's count, so anything else writing to it
// counts too).

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/loopback"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipts"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

var (
	benchBacklog  = flag.Int("leafline.backlog", 200_000, "bench: events preloaded in edge1's events stream (phases a-d)")
	benchSize     = flag.Int("leafline.size", 256, "bench: event payload bytes")
	benchFile     = flag.Int("leafline.file", 20_000, "bench: events for the file sink run (edge2; at most -leafline.backlog)")
	benchNaive    = flag.Int("leafline.naive", 5_000, "bench: events for the naive loop (c)")
	benchE2E      = flag.Int("leafline.e2e", 10_000, "bench: events for end to end (e); the issue's figure is 50000")
	benchDrain    = flag.Int("leafline.drain", 20_000, "bench: receipts accumulated during the cut for the drain (f); the issue's figure is 100000")
	benchProbe    = flag.Int("leafline.probe", 10_000, "bench: events for the SyncAlways publish and sourcing probe (s)")
	benchRSS      = flag.Int("leafline.rss", 100_000, "bench: backlog for the separate-process edge RSS run (r; the issue's figure is 1000000); 0 skips it")
	benchProfile  = flag.String("leafline.profile", "", "bench: write a CPU profile per phase into this directory")
	benchFwd      = flag.Int("leafline.fwd", 20_000, "bench: receipts for the sourcing-vs-forwarder hop experiment (g)")
	benchBatch    = flag.Int("leafline.batch", 0, "bench: delivery.batch_size for every edge (0: the default); a non-default value is printed in the banner")
	benchBBatch   = flag.Int("leafline.backlog-batch", 0, "bench: delivery.backlog_batch_size for every edge (0: the default, 1000 with the store sink, twice batch_size with the file sink); a non-default value is printed in the banner")
	benchRSSAge   = flag.Duration("leafline.rss-age", 0, "bench: wait this long after the RSS preload before starting the edge process (older than the 2m duplicate window: no dedupe map rebuilt for the backlog)")
	benchRSSBin   = flag.String("leafline.rss-bin", "", "bench: binary to run for (r) instead of building ./cmd/leafline (must accept run --config FILE)")
	benchRSSProf  = flag.String("leafline.rss-profile", "", "bench: write the edge process's heap profile (ops.pprof), taken when its Go heap peaked during (r), to this file")
	benchRSSLimit = flag.String("leafline.rss-memlimit", "", "bench: GOMEMLIMIT for the edge process of (r), e.g. 200MiB or off (it replaces the edge default of memory_limit_bytes, 192 MiB; empty: that default)")
	benchUnsigned = flag.Bool("leafline.unsigned", false, "bench: LocalOptions.UnsignedReceipts (default: signed receipts, as LocalSystem)")
	benchInsecure = flag.Bool("leafline.insecure", false, "bench: LocalOptions.Insecure (default: mutual TLS links, as LocalSystem)")
	benchIDs      = flag.String("leafline.ids", "random", "bench: event ids, random (uniform: every receipt and stored event lands on its own B+tree page) or time (UUIDv7-like, 10 per millisecond: they append)")
	benchOnly     = flag.String("leafline.only", "", "bench: comma-separated phases to run (k,z,g,s,a,b,c,d,f,e,r; x only when named); empty runs all but x")
)

// benchSetting prints a size flag: "default" for 0.
func benchSetting(n int) string {
	if n == 0 {
		return "default"
	}
	return strconv.Itoa(n)
}

func benchOn(phase string) bool {
	if *benchOnly == "" {
		return phase != "x"
	}
	return slices.Contains(strings.Split(*benchOnly, ","), phase)
}

// ---- measurement ----

func benchCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchStatusKB reads a "VmXXX:" line of /proc/<pid>/status in kB.
func benchStatusKB(pid, field string) int64 {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

// benchFlushes is how many cache flushes (what an fsync asks of the disk,
// several fsyncs sharing one when they meet in the file system's journal)
// the disk under os.TempDir has completed, from /proc/diskstats; -1 where
// the kernel does not count them for it (tmpfs, overlay, Linux before
// 5.5). The count is the disk's, not the process's: anything else writing
// to that disk counts too.
func benchFlushes() int64 {
	var st unix.Stat_t
	if unix.Stat(os.TempDir(), &st) != nil {
		return -1
	}
	dev, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return -1
	}
	if _, err := os.Stat(filepath.Join(dev, "partition")); err == nil {
		dev = filepath.Dir(dev) // a partition's flushes go to its disk
	}
	data, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(data)) {
		// major minor name, 11 I/O fields, 4 discard fields, then flushes completed
		if f := strings.Fields(line); len(f) >= 20 && f[2] == filepath.Base(dev) {
			if n, err := strconv.ParseInt(f[18], 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

type benchRow struct {
	key, what string
	n         int
	dur       time.Duration
	cpu       time.Duration
	rssKB     int64
	lat       []time.Duration
	note      string
	// flushes is how many cache flushes the disk completed during the
	// row (benchFlushes), -1 where unknown.
	flushes int64
}

func (r benchRow) eps() float64 {
	if r.dur <= 0 {
		return 0
	}
	return float64(r.n) / r.dur.Seconds()
}

type benchPhase struct {
	name    string
	t0      time.Time
	cpu0    time.Duration
	flushes int64
	prof    *os.File
}

func benchBegin(name string) *benchPhase {
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset VmHWM
	p := &benchPhase{name: name}
	if dir := *benchProfile; dir != "" {
		_ = os.MkdirAll(dir, 0o755)
		f, err := os.Create(filepath.Join(dir, name+".pprof"))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			p.prof = f
		}
	}
	p.t0, p.cpu0, p.flushes = time.Now(), benchCPU(), benchFlushes()
	return p
}

func (p *benchPhase) end(key, what string, n int, lat []time.Duration, note string) benchRow {
	r := benchRow{key: key, what: what, n: n, dur: time.Since(p.t0), cpu: benchCPU() - p.cpu0,
		rssKB: benchStatusKB("self", "VmHWM"), lat: lat, note: note, flushes: -1}
	if f := benchFlushes(); f >= 0 && p.flushes >= 0 {
		r.flushes = f - p.flushes
	}
	if p.prof != nil {
		pprof.StopCPUProfile()
		p.prof.Close()
		if f, err := os.Create(filepath.Join(*benchProfile, p.name+".heap")); err == nil {
			runtime.GC()
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	return r
}

func benchPct(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return -1
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}

func benchPrintRows(w io.Writer, rows []benchRow) {
	fmt.Fprintf(w, "%-4s %-52s %9s %8s %10s %9s %9s %9s %9s %8s  %s\n",
		"row", "what", "events", "seconds", "events/s", "p50_ms", "p99_ms", "cpu_s/1k", "rss_MiB", "flush/ev", "note")
	ms := func(d time.Duration) string {
		if d < 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(d)/1e6)
	}
	for _, r := range rows {
		cpu := "-"
		if r.n > 0 && r.cpu > 0 {
			cpu = fmt.Sprintf("%.3f", r.cpu.Seconds()/float64(r.n)*1000)
		}
		rss := "-"
		if r.rssKB > 0 {
			rss = fmt.Sprintf("%.0f", float64(r.rssKB)/1024)
		}
		flush := "-"
		if r.n > 0 && r.flushes >= 0 {
			flush = fmt.Sprintf("%.2f", float64(r.flushes)/float64(r.n))
		}
		fmt.Fprintf(w, "%-4s %-52s %9d %8.2f %10.0f %9s %9s %9s %9s %8s  %s\n",
			r.key, r.what, r.n, r.dur.Seconds(), r.eps(), ms(benchPct(r.lat, 0.5)), ms(benchPct(r.lat, 0.99)), cpu, rss, flush, r.note)
	}
}

// ---- timeline of stream fills ----

type benchGauge struct {
	name string
	get  func() uint64
}

type benchSample struct {
	t time.Duration
	v []uint64
}

// benchTimeline samples the gauges every 250ms until stop is called.
type benchTimeline struct {
	gauges []benchGauge
	t0     time.Time
	mu     sync.Mutex
	s      []benchSample
	done   chan struct{}
	wg     sync.WaitGroup
}

func benchWatch(gauges ...benchGauge) *benchTimeline {
	tl := &benchTimeline{gauges: gauges, t0: time.Now(), done: make(chan struct{})}
	tl.sample()
	tl.wg.Add(1)
	go func() {
		defer tl.wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-tl.done:
				return
			case <-t.C:
				tl.sample()
			}
		}
	}()
	return tl
}

func (tl *benchTimeline) sample() {
	v := make([]uint64, len(tl.gauges))
	for i, g := range tl.gauges {
		v[i] = g.get()
	}
	tl.mu.Lock()
	tl.s = append(tl.s, benchSample{time.Since(tl.t0), v})
	tl.mu.Unlock()
}

func (tl *benchTimeline) stop() {
	close(tl.done)
	tl.wg.Wait()
	tl.sample()
}

// report prints, per gauge, how much it grew, over which span (first to
// last change), the average rate over that span and the best 2s rate.
func (tl *benchTimeline) report(w io.Writer, title string) {
	fmt.Fprintf(w, "  stages of %s (sampled every 250ms; t from the phase start):\n", title)
	fmt.Fprintf(w, "    %-34s %9s %8s %8s %10s %10s\n", "stage", "grew", "t_first", "t_last", "avg/s", "best2s/s")
	for i, g := range tl.gauges {
		first, last := -1, -1
		base := tl.s[0].v[i]
		for j := 1; j < len(tl.s); j++ {
			if tl.s[j].v[i] != tl.s[j-1].v[i] {
				if first < 0 {
					first = j - 1
				}
				last = j
			}
		}
		grew := tl.s[len(tl.s)-1].v[i] - base
		if first < 0 {
			fmt.Fprintf(w, "    %-34s %9d %8s %8s %10s %10s\n", g.name, grew, "-", "-", "-", "-")
			continue
		}
		span := tl.s[last].t - tl.s[first].t
		best := 0.0
		for j := first; j <= last; j++ {
			for k := j + 1; k <= last; k++ {
				if dt := tl.s[k].t - tl.s[j].t; dt >= 2*time.Second {
					best = max(best, float64(tl.s[k].v[i]-tl.s[j].v[i])/dt.Seconds())
					break
				}
			}
		}
		fmt.Fprintf(w, "    %-34s %9d %8.1f %8.1f %10.0f %10.0f\n", g.name, grew,
			tl.s[first].t.Seconds(), tl.s[last].t.Seconds(), float64(grew)/span.Seconds(), best)
	}
}

// ---- runner tracing ----

// benchTrace receives an edge runner's contract steps (App.traceRunner),
// to count its ACKs, and each finished batch's stage times (runner.onBatch,
// installed by benchEnv.open). Consecutive batches overlap in the runner's
// pipeline, so an event's latency is taken from its batch: from the start
// of the fetch that returned it to its batch's final acknowledgements.
//
// The per-batch breakdown sums, per stage, the mean time a batch spent in
// it; the stages of different batches overlap, so the sum exceeds the wall
// time per batch (printed next to it):
//
//	F  fetch (the Fetch call and decode);
//	Q  fetched, waiting for the committer;
//	C  commit: sink write, DLQ, outbox transaction (store sink: the sink
//	   write too) — until the commit returned;
//	P  receipts: queued for the publisher, signed, published, PubAck'ed;
//	M  PubAck'ed until marked published (MarkPublished);
//	A  marked until the last ACK sent.
type benchTrace struct {
	mu      sync.Mutex
	lat     []time.Duration
	acks    atomic.Int64
	seg     [6]time.Duration
	batches int
	msgs    int
	first   time.Time
	last    time.Time
}

func (tr *benchTrace) step(step, _ string, _ *jetstream.MsgMetadata) {
	if step == "ack" {
		tr.acks.Add(1)
	}
}

func (tr *benchTrace) batch(bt runner.BatchTimes) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	d := bt.Done.Sub(bt.Fetch)
	for range bt.Messages {
		tr.lat = append(tr.lat, d)
	}
	if tr.batches == 0 {
		tr.first = bt.Fetch
	}
	tr.last = bt.Done
	tr.batches++
	tr.msgs += bt.Messages
	seg := func(i int, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			tr.seg[i] += to.Sub(from)
		}
	}
	seg(0, bt.Fetch, bt.Fetched)
	seg(1, bt.Fetched, bt.Commit)
	seg(2, bt.Commit, bt.Durable)
	seg(3, bt.Durable, bt.PubAck)
	seg(4, bt.PubAck, bt.Marked)
	seg(5, bt.Marked, bt.Done)
}

func (tr *benchTrace) latencies() []time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.lat)
}

// breakdown returns the mean per-batch time of each stage, the number of
// batches, the mean batch size and the wall time per batch.
func (tr *benchTrace) breakdown() (seg [6]time.Duration, batches int, size float64, wall time.Duration) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.batches == 0 {
		return seg, 0, 0, 0
	}
	for i := range seg {
		seg[i] = tr.seg[i] / time.Duration(tr.batches)
	}
	return seg, tr.batches, float64(tr.msgs) / float64(tr.batches), tr.last.Sub(tr.first) / time.Duration(tr.batches)
}

// benchHist returns a histogram's sample sum and count.
func benchHist(h prometheus.Histogram) (float64, uint64) {
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.Histogram == nil {
		return 0, 0
	}
	return m.Histogram.GetSampleSum(), m.Histogram.GetSampleCount()
}

// ---- the system under test ----

type benchEnv struct {
	b      *testing.B
	ls     *LocalSystem
	gates  map[string]chan struct{}
	traces map[string]*benchTrace
	nc     map[string]*nats.Conn
	js     map[string]jetstream.JetStream
	closed sync.Once
}

func benchLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newBenchEnv(b *testing.B, dir string, edges int, filters map[string]string, sink map[string]string) *benchEnv {
	ls, err := NewLocalSystem(dir, LocalOptions{Edges: edges, Logger: benchLogger(), UnsignedReceipts: *benchUnsigned, Insecure: *benchInsecure, Configure: func(c *topology.Config) {
		c.JetStream.SyncInterval = "2m" // preload only; restart() switches to always
		if s, ok := sink[c.Site]; ok {
			c.Sink.Type = s
		}
		if *benchBatch > 0 {
			c.Delivery.BatchSize = *benchBatch
		}
		if *benchBBatch > 0 {
			c.Delivery.BacklogBatchSize = *benchBBatch
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	for name, f := range filters {
		s, _ := ls.Topology.Site(name)
		s.Filter = f
	}
	env := &benchEnv{b: b, ls: ls, gates: map[string]chan struct{}{}, traces: map[string]*benchTrace{},
		nc: map[string]*nats.Conn{}, js: map[string]jetstream.JetStream{}}
	ls.prepare = func(name string, a *App) {
		if g, ok := env.gates[name]; ok {
			tr := env.traces[name]
			a.opts.runnerHooks = runner.Hooks{Gate: g, Trace: tr.step, OnBatch: tr.batch}
		}
	}
	b.Cleanup(env.close)
	return env
}

func (env *benchEnv) startAll() {
	for _, e := range env.ls.Topology.Edges() {
		env.gates[e.Name] = make(chan struct{})
		env.traces[e.Name] = &benchTrace{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := env.ls.StartAll(ctx); err != nil {
		env.b.Fatal(err)
	}
	for _, s := range env.ls.Topology.Sites {
		if nc := env.nc[s.Name]; nc != nil {
			nc.Close()
		}
		nc, err := nats.Connect(env.ls.App(s.Name).ClientURL(), nats.MaxReconnects(-1))
		if err != nil {
			env.b.Fatal(err)
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
		if err != nil {
			env.b.Fatal(err)
		}
		env.nc[s.Name], env.js[s.Name] = nc, js
	}
}

// restart stops every box and starts it again with the given sync interval
// (runner gates closed again).
func (env *benchEnv) restart(sync string) {
	sites := env.ls.Topology.Sites
	for i := len(sites) - 1; i >= 0; i-- {
		if err := env.ls.Stop(sites[i].Name); err != nil {
			env.b.Fatal(err)
		}
	}
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = sync
	}
	env.startAll()
}

func (env *benchEnv) close() {
	env.closed.Do(func() {
		for _, nc := range env.nc {
			nc.Close()
		}
		env.ls.Close()
	})
}

func (env *benchEnv) open(edge string) {
	close(env.gates[edge])
}

// count is how many messages a stream has stored so far: its last
// sequence, since the streams after L1A delete what the next hop took.
func (env *benchEnv) count(site, stream string) func() uint64 {
	return func() uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return streamState(ctx, env.js[site], stream).LastSeq
	}
}

func (env *benchEnv) applied() uint64 {
	return env.ls.App("l1").Completions().Stats().Applied
}

// originDone counts the origin messages the L1 completion service's origin
// tracker has finished with.
func (env *benchEnv) originDone() uint64 {
	st := env.ls.App("l1").Completions().Stats()
	return st.OriginTracked + st.OriginKnown + st.OriginSkipped
}

func (env *benchEnv) waitUntil(what string, d time.Duration, cond func() bool) {
	if err := waitFor(context.Background(), d, cond); err != nil {
		env.b.Fatalf("bench: waiting for %s: %v", what, err)
	}
}

func (env *benchEnv) connected(site string) func() bool {
	return func() bool { return env.ls.App(site).UpstreamConnected() }
}

// benchPublish publishes n events (subject and id from i) with a bounded
// window of outstanding PubAcks; at, if set, records each publish time.
func benchPublish(ctx context.Context, js jetstream.JetStream, n int, payload []byte, subj, id func(i int) string, at []time.Time) error {
	const window = 2048
	futs := make([]jetstream.PubAckFuture, 0, window)
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := 0; i < n; i++ {
		if len(futs) == window {
			if err := wait(futs[0]); err != nil {
				return err
			}
			futs = futs[1:]
		}
		m := nats.NewMsg(subj(i))
		m.Header.Set(jetstream.MsgIDHeader, id(i))
		m.Data = payload
		if at != nil {
			at[i] = time.Now()
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		if err := wait(f); err != nil {
			return err
		}
	}
	return nil
}

func benchPayload(n int) []byte {
	p := []byte(`{"bench":"` + strings.Repeat("x", max(0, n-13)) + `"}`)
	return p[:min(len(p), max(n, 0))]
}

// benchID names event i of a phase: unique and deterministic. By default
// in random order like UUIDv4 ids (a bijective 64-bit mix of i), so that
// the store sink's and the outbox's B+trees see random inserts; with
// -leafline.ids time like UUIDv7 ids minted at 10 a millisecond (the time,
// a counter, then random bits), which they append.
func benchID(prefix string) func(int) string {
	if *benchIDs == "time" {
		return func(i int) string {
			ms, r := uint64(0x019ad3c00000)+uint64(i)/10, benchMix(uint64(i))
			return fmt.Sprintf("%s-%08x-%04x-7%03x-%04x-%012x", prefix, ms>>16, ms&0xffff, uint64(i)%10, 0x8000|(r>>48)&0x3fff, r&0xffffffffffff)
		}
	}
	return func(i int) string { return fmt.Sprintf("%s-%016x", prefix, benchMix(uint64(i))) }
}

// benchMix is splitmix64's finalizer: a bijection on uint64.
func benchMix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// ---- the benchmark ----

// BenchmarkLeafline runs every phase once and prints the table (see the
// file comment). It ignores b.N.
func BenchmarkLeafline(b *testing.B) {
	if testing.Short() {
		b.Skip("bench: not in -short")
	}
	if *benchIDs != "random" && *benchIDs != "time" {
		b.Fatalf("-leafline.ids %q: want random or time", *benchIDs)
	}
	ctx := context.Background()
	out := os.Stdout
	B := *benchBacklog
	F := min(*benchFile, B)
	D, E, S := *benchDrain, *benchE2E, *benchProbe
	payload := benchPayload(*benchSize)
	var rows []benchRow
	load := func() string {
		l, _ := os.ReadFile("/proc/loadavg")
		return strings.Join(strings.Fields(string(l))[:3], " ")
	}
	fmt.Fprintf(out, "bench: leafline, GOMAXPROCS=%d, NumCPU=%d, loadavg at start %s\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), load())
	fmt.Fprintf(out, "bench: backlog=%d size=%dB file=%d naive=%d drain=%d e2e=%d probe=%d rss=%d ids=%s; signed receipts=%t, mutual TLS links=%t, edge batch_size=%s backlog_batch_size=%s\n",
		B, len(payload), F, *benchNaive, D, E, S, *benchRSS, *benchIDs, !*benchUnsigned, !*benchInsecure, benchSetting(*benchBatch), benchSetting(*benchBBatch))

	// Phases without servers first, on a quiet process.
	if benchOn("k") {
		rows = append(rows, benchSigning(b, B)...)
	}
	if benchOn("x") {
		rows = append(rows, benchOutboxKeys(b, B)...)
	}
	if benchOn("z") {
		rows = append(rows, benchDiskFlush(b, 1), benchDiskFlush(b, 16))
	}
	if benchOn("g") {
		rows = append(rows, benchForward(b, *benchFwd)...)
	}
	if !slices.ContainsFunc([]string{"s", "a", "b", "c", "d", "f", "e"}, benchOn) {
		if *benchRSS > 0 && benchOn("r") {
			rows = append(rows, benchRSSRun(b, *benchRSS, payload))
		}
		benchPrintRows(out, rows)
		return
	}

	env := newBenchEnv(b, b.TempDir(), 3,
		map[string]string{"edge1": "events.b.>", "edge2": "events.b.f.>", "edge3": "events.*.d.>"},
		map[string]string{"edge2": "file"})
	ls := env.ls
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool {
		return env.connected("hub")() && env.connected("edge1")() && env.connected("edge2")() && env.connected("edge3")()
	})

	// ---- P: preload with sync_interval 2m ----
	t0 := time.Now()
	ls.Links["hub"].Cut()
	for _, e := range []string{"edge1", "edge2", "edge3"} {
		ls.Links[e].Cut()
	}
	backlogSubj := func(i int) string {
		if i < F {
			return fmt.Sprintf("events.b.f.%d", i%8)
		}
		return fmt.Sprintf("events.b.s.%d", i%8)
	}
	ph := benchBegin("preload_publish")
	if err := benchPublish(ctx, env.js["l1"], B, payload, backlogSubj, benchID("b"), nil); err != nil {
		b.Fatal(err)
	}
	if err := benchPublish(ctx, env.js["l1"], D, payload, func(i int) string { return fmt.Sprintf("events.x.d.%d", i%8) }, benchID("d"), nil); err != nil {
		b.Fatal(err)
	}
	rows = append(rows, ph.end("P1", "setup: L1 publish async, sync 2m (not SyncAlways)", B+D, nil, ""))
	ph = benchBegin("preload_ha")
	ls.Links["hub"].Restore()
	env.waitUntil("HA filled", 10*time.Minute, func() bool { return env.count("hub", "HA")() >= uint64(B+D) })
	rows = append(rows, ph.end("P2", "setup: sourcing L1A->HA backlog, sync 2m", B+D, nil, "reference for row s2"))
	ph = benchBegin("preload_l2a")
	for _, e := range []string{"edge1", "edge2", "edge3"} {
		ls.Links[e].Restore()
	}
	env.waitUntil("L2A filled", 10*time.Minute, func() bool {
		return env.count("edge1", "L2A")() >= uint64(B) && env.count("edge2", "L2A")() >= uint64(F) && env.count("edge3", "L2A")() >= uint64(D)
	})
	rows = append(rows, ph.end("P3", "setup: sourcing HA->L2A x3 edges, sync 2m", B+F+D, nil, "msgs written in 3 edge servers"))
	ph = benchBegin("preload_origin")
	env.waitUntil("origin tracker", 30*time.Minute, func() bool { return env.originDone() >= uint64(B+D) })
	rows = append(rows, ph.end("P4", "setup: L1 origin tracker catches up, sync 2m", B+D, nil, "time after P3"))
	for _, e := range []string{"edge1", "edge2", "edge3"} {
		ls.Links[e].Cut()
	}
	env.restart("always")
	env.waitUntil("hub link", time.Minute, env.connected("hub"))
	fmt.Fprintf(out, "bench: preloaded in %.1fs; every box restarted with SyncAlways; edge links cut\n", time.Since(t0).Seconds())

	// ---- s: publish and sourcing under SyncAlways ----
	if benchOn("s") {
		ls.Links["hub"].Cut()
		origin0 := env.originDone()
		ph3 := benchBegin("s3_origin")
		ph = benchBegin("s1_publish")
		if err := benchPublish(ctx, env.js["l1"], S, payload, func(i int) string { return fmt.Sprintf("events.p.%d", i%8) }, benchID("p"), nil); err != nil {
			b.Fatal(err)
		}
		rows = append(rows, ph.end("s1", "L1 publish async window 2048 (SyncAlways)", S, nil, "the producer's side"))
		haBefore := env.count("hub", "HA")()
		ph = benchBegin("s2_sourcing")
		ls.Links["hub"].Restore()
		env.waitUntil("HA probe", 10*time.Minute, func() bool { return env.count("hub", "HA")() >= haBefore+uint64(S) })
		rows = append(rows, ph.end("s2", "sourcing L1A->HA backlog (SyncAlways)", S, nil, "durable source, 1 fsync per msg"))
		env.waitUntil("origin tracker", 30*time.Minute, func() bool { return env.originDone() >= origin0+uint64(S) })
		rows = append(rows, ph3.end("s3", "L1 origin tracker: KV records for S (SyncAlways)", S, nil, "from start of s1; rss/profile: s1"))
	}

	// ---- a: raw consume ----
	if benchOn("a") {
		rows = append(rows, benchRawConsume(b, env, B)...)
	}
	// ---- b: receipt ceiling ----
	if benchOn("b") {
		rows = append(rows, benchCeiling(b, env, B)...)
	}
	// ---- c: naive ----
	if benchOn("c") {
		rows = append(rows, benchNaiveLoop(b, env, min(*benchNaive, B)))
	}

	// ---- d: the runner ----
	var breakdowns []string
	runRunner := func(key, what, edge string, n int, note string) benchRow {
		tr := env.traces[edge]
		m := ls.App(edge).Metrics()
		sink0, sinkN0 := benchHist(m.sinkSeconds)
		pub0, pubN0 := benchHist(m.pubAckSeconds)
		ph := benchBegin(key)
		env.open(edge)
		env.waitUntil(edge+" drained", 30*time.Minute, func() bool { return tr.acks.Load() >= int64(n) })
		row := ph.end(key, what, n, tr.latencies(), note)
		seg, batches, size, wall := tr.breakdown()
		sink1, sinkN1 := benchHist(m.sinkSeconds)
		pub1, pubN1 := benchHist(m.pubAckSeconds)
		msf := func(d time.Duration) float64 { return float64(d) / 1e6 }
		per := func(sum float64, n uint64) float64 {
			if n == 0 {
				return 0
			}
			return sum / float64(n) * 1000
		}
		breakdowns = append(breakdowns, fmt.Sprintf(
			"    %-3s %-7s batches=%d mean_batch=%.1f wall/batch=%.2fms | per-batch ms, overlapping: F fetch=%.2f Q wait=%.2f C commit=%.2f P publish=%.2f M mark=%.2f A acks=%.2f | metrics: sink/commit=%.2f puback=%.2f",
			key, edge, batches, size, msf(wall), msf(seg[0]), msf(seg[1]), msf(seg[2]), msf(seg[3]), msf(seg[4]), msf(seg[5]),
			per(sink1-sink0, sinkN1-sinkN0), per(pub1-pub0, pubN1-pubN0)))
		return row
	}
	var dStore, dFile, rowE benchRow
	if benchOn("d") {
		dStore = runRunner("d", "leafline runner, store sink, defaults (edge1)", "edge1", B, "")
		dFile = runRunner("d2", "leafline runner, file sink, defaults (edge2)", "edge2", F, "one file+fsync per event")
		rows = append(rows, dStore, dFile)
	}

	// ---- f: drain after a cut ----
	tl, tl2 := (*benchTimeline)(nil), (*benchTimeline)(nil)
	if benchOn("f") || benchOn("e") {
		// Every receipt is in RE once the runner has ACKed its event; the
		// note says so, so that a drain that waits can be told from a
		// receipt that never reached RE.
		re0 := env.count("edge3", "RE")()
		d3 := runRunner("d3", "leafline runner, store sink (edge3, link cut)", "edge3", D, "builds the receipt backlog for f")
		d3.note += fmt.Sprintf("; RE stored %d", env.count("edge3", "RE")()-re0)
		rows = append(rows, d3)
		base := env.applied()
		tl = benchWatch(
			benchGauge{"RE@edge3 (edge receipts)", env.count("edge3", "RE")},
			benchGauge{"RH@hub (sourced from RE)", env.count("hub", "RH")},
			benchGauge{"R1@l1 (sourced from RH)", env.count("l1", "R1")},
			benchGauge{"completions applied at L1", env.applied},
		)
		ph = benchBegin("f_drain")
		ls.Links["edge3"].Restore()
		env.waitUntil("drain", 30*time.Minute, func() bool { return env.applied() >= base+uint64(D) })
		rowF := ph.end("f", "drain: receipts backlog, link restore -> all completed at L1", D, nil, "")
		tl.stop()
		rows = append(rows, rowF)

		// ---- e: end to end ----
		at := make([]time.Time, E)
		base = env.applied()
		tl2 = benchWatch(
			benchGauge{"L1A@l1 (published)", env.count("l1", "L1A")},
			benchGauge{"HA@hub (sourced)", env.count("hub", "HA")},
			benchGauge{"L2A@edge3 (sourced)", env.count("edge3", "L2A")},
			benchGauge{"runner ACKs edge3", func() uint64 { return uint64(env.traces["edge3"].acks.Load()) }},
			benchGauge{"RE@edge3 (receipts)", env.count("edge3", "RE")},
			benchGauge{"RH@hub (sourced)", env.count("hub", "RH")},
			benchGauge{"R1@l1 (sourced)", env.count("l1", "R1")},
			benchGauge{"completions applied at L1", env.applied},
		)
		ph = benchBegin("e_e2e")
		var pubErr error
		var pubDur time.Duration
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			pubErr = benchPublish(ctx, env.js["l1"], E, payload, func(i int) string { return fmt.Sprintf("events.e.d.%d", i%8) }, benchID("e"), at)
			pubDur = time.Since(s)
		}()
		env.waitUntil("end to end", 30*time.Minute, func() bool { return env.applied() >= base+uint64(E) })
		wg.Wait()
		if pubErr != nil {
			b.Fatal(pubErr)
		}
		rowE = ph.end("e", "end to end: publish at L1 -> completion at L1", E, nil, fmt.Sprintf("publishing took %.1fs", pubDur.Seconds()))
		tl2.stop()
		rowE.lat = benchE2ELatency(b, env, at, "edge3")
		rows = append(rows, rowE)
	}

	// ---- r: separate-process edge RSS ----
	var rssRow *benchRow
	if *benchRSS > 0 && benchOn("r") {
		env.close()
		r := benchRSSRun(b, *benchRSS, payload)
		rssRow = &r
		rows = append(rows, r)
	}

	// ---- report ----
	fmt.Fprintf(out, "\nbench: loadavg at end %s; %d CPUs\n", load(), runtime.NumCPU())
	benchPrintRows(out, rows)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "  runner batch breakdown (mean per batch; see benchTrace):")
	for _, l := range breakdowns {
		fmt.Fprintln(out, l)
	}
	if tl != nil {
		tl.report(out, "f (drain)")
		tl2.report(out, "e (end to end)")
	}
	var a, ceil float64
	var aRow, bRow benchRow
	for _, r := range rows {
		if strings.HasPrefix(r.key, "a") && r.eps() > a {
			a, aRow = r.eps(), r
		}
		if (r.key == "b" || r.key == "b2") && r.eps() > ceil {
			ceil, bRow = r.eps(), r
		}
	}
	var c float64
	for _, r := range rows {
		if r.key == "c" {
			c = r.eps()
		}
	}
	d := dStore.eps()
	fmt.Fprintf(out, "\nratios: d/c=%.1f (target >= 10)  d/min(a,b)=%.2f (target >= 0.5; a=%.0f b=%.0f)  e/d=%.3f (target >= 0.5)  d_file/c=%.1f\n",
		d/c, d/min(a, ceil), a, ceil, rowE.eps()/d, dFile.eps()/c)
	if perEv := dStore.cpu.Seconds() / float64(dStore.n); perEv > 0 && dStore.dur > 0 {
		// The process (every server and the runner) shares GOMAXPROCS
		// cores: d can go no faster than its CPU per event allows.
		cores := runtime.GOMAXPROCS(0)
		fmt.Fprintf(out, "bounds: d kept %.2f of %d cores busy at %.3f CPU-s per 1k events, so its CPU caps it at %.0f/s here (%.2f x min(a,b)); a and b alone cost %.3f + %.3f CPU-s per 1k\n",
			dStore.cpu.Seconds()/dStore.dur.Seconds(), cores, perEv*1000, float64(cores)/perEv, float64(cores)/perEv/min(a, ceil),
			aRow.cpu.Seconds()/float64(max(aRow.n, 1))*1000, bRow.cpu.Seconds()/float64(max(bRow.n, 1))*1000)
	}
	if rowE.n > 0 && rowE.flushes > 0 && d > 0 {
		// Every hop stores and fsyncs each message on its own; what the
		// disk can flush per second bounds e.
		perEv := float64(rowE.flushes) / float64(rowE.n)
		var disk float64
		for _, r := range rows {
			if strings.HasPrefix(r.key, "z") && r.flushes > 0 {
				disk = max(disk, float64(r.flushes)/r.dur.Seconds())
			}
		}
		ceiling := "z not run"
		if disk > 0 {
			ceiling = fmt.Sprintf("z: this disk flushed at most %.0f/s", disk)
		}
		fmt.Fprintf(out, "bounds: e made %.2f disk flushes per event at %.0f flushes/s; e >= 0.5 d would take %.0f flushes/s at that count (%s)\n",
			perEv, float64(rowE.flushes)/rowE.dur.Seconds(), perEv*d/2, ceiling)
	}
	if rssRow != nil {
		fmt.Fprintf(out, "edge process peak RSS draining %d events: %.0f MiB (target < 256 MiB)\n", rssRow.n, float64(rssRow.rssKB)/1024)
	}
	fmt.Fprintf(out, "bench leafline_eps=%.0f naive_eps=%.0f ceiling_eps=%.0f d_over_c=%.1f d_over_ceiling=%.2f\n",
		d, c, min(a, ceil), d/c, d/min(a, ceil))
}

// benchDiskFlush: (z) what the disk under the bench's files gives fsyncs:
// writers goroutines, each appending 256 bytes to a file of its own and
// fsyncing it, for two seconds. Its flush/ev column says how many of
// those fsyncs the file system's journal could share.
func benchDiskFlush(b *testing.B, writers int) benchRow {
	dir := b.TempDir()
	files := make([]*os.File, writers)
	for i := range files {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("w%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	var n atomic.Int64
	stop := time.Now().Add(2 * time.Second)
	rec := make([]byte, 256)
	ph := benchBegin(fmt.Sprintf("z_fsync_%d", writers))
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for _, f := range files {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if _, err := f.Write(rec); err != nil {
					errs <- err
					return
				}
				if err := f.Sync(); err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return ph.end(fmt.Sprintf("z%d", writers), fmt.Sprintf("disk: 256 B append + fsync, %d writer(s)", writers), int(n.Load()), nil, "events = fsyncs")
}

// benchRawConsume: (a) a durable pull consumer on edge1's L2A that fetches
// and ACKs, nothing else; Fetch batches like the runner's, and a long-lived
// Messages iterator.
func benchRawConsume(b *testing.B, env *benchEnv, n int) []benchRow {
	ctx := context.Background()
	js := env.js["edge1"]
	cfg := env.ls.Configs["edge1"].Delivery
	mk := func(name string) jetstream.Consumer {
		c, err := js.CreateOrUpdateConsumer(ctx, "L2A", jetstream.ConsumerConfig{
			Durable: name, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: cfg.MaxAckPending,
			AckWait: 30 * time.Second, MaxRequestBatch: 1000,
		})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	var rows []benchRow
	cons := mk("bench-raw-fetch")
	lat := make([]time.Duration, 0, n)
	ph := benchBegin("a_fetch")
	for got := 0; got < n; {
		start := time.Now()
		batch, err := cons.Fetch(cfg.BatchSize, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
			got++
		}
	}
	rows = append(rows, ph.end("a", fmt.Sprintf("raw consume: Fetch(%d)+Ack, durable pull", cfg.BatchSize), n, lat, ""))

	cons = mk("bench-raw-iter")
	ph = benchBegin("a_iter")
	iter, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		m, err := iter.Next()
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
	iter.Stop()
	rows = append(rows, ph.end("a2", "raw consume: Messages iterator (1000)+Ack", n, nil, ""))
	return rows
}

func benchReceipt(b *testing.B, id string) outbox.Record {
	rc := receipts.New(id, "L1A", "edge1", "edge1", receipts.StatusProcessed, time.Now().UTC())
	data, err := rc.Encode()
	if err != nil {
		b.Fatal(err)
	}
	return outbox.Record{Key: rc.MsgID(), Data: data}
}

// benchCeiling: (b) durably storing receipts in a receipts stream on edge1's
// server: atomic batch publish (one fsync per batch), two batch sizes, and
// per-message async publish for reference.
func benchCeiling(b *testing.B, env *benchEnv, n int) []benchRow {
	ctx := context.Background()
	js := env.js["edge1"]
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "BENCH_RC", Subjects: []string{"bench.rc.>"}, Storage: jetstream.FileStorage,
		Discard: jetstream.DiscardNew, MaxBytes: 1 << 30, AllowAtomicPublish: true, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	msgs := func(prefix string, count int) []*nats.Msg {
		out := make([]*nats.Msg, count)
		for i := range out {
			rec := benchReceipt(b, fmt.Sprintf("%s-%08d", prefix, i))
			m := nats.NewMsg("bench.rc.edge1.processed")
			m.Data = rec.Data
			m.Header.Set(jetstream.MsgIDHeader, rec.Key)
			out[i] = m
		}
		return out
	}
	var rows []benchRow
	for _, size := range []int{256, 1000} {
		all := msgs(fmt.Sprintf("rc%d", size), n)
		lat := make([]time.Duration, 0, n)
		ph := benchBegin(fmt.Sprintf("b_atomic%d", size))
		for i := 0; i < n; i += size {
			chunk := all[i:min(i+size, n)]
			start := time.Now()
			if _, err := jetstreamext.PublishMsgBatch(ctx, js, chunk); err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			for range chunk {
				lat = append(lat, d)
			}
		}
		key := "b"
		if size == 1000 {
			key = "b2"
		}
		rows = append(rows, ph.end(key, fmt.Sprintf("receipt ceiling: atomic batch %d (AllowAtomicPublish)", size), n, lat, "1 fsync per batch"))
	}
	k := min(n, 20_000)
	all := msgs("rcasync", k)
	ph := benchBegin("b_async")
	futs := make([]jetstream.PubAckFuture, 0, 2048)
	for _, m := range all {
		if len(futs) == 2048 {
			<-futs[0].Ok()
			futs = futs[1:]
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		futs = append(futs, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("async publish did not complete")
	}
	rows = append(rows, ph.end("b3", "receipts: per-message async publish (window 2048)", k, nil, "reference: 1 fsync per msg"))
	return rows
}

// benchNaiveLoop: (c) the seed's pseudo-code taken literally, per message:
// sink write and outbox record in one bbolt transaction (store sink), publish
// the receipt and wait for its PubAck, mark it published, ACK.
func benchNaiveLoop(b *testing.B, env *benchEnv, n int) benchRow {
	ctx := context.Background()
	js := env.js["edge1"]
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "BENCH_NAIVE", Subjects: []string{"bench.naive.>"}, Storage: jetstream.FileStorage,
		Discard: jetstream.DiscardNew, MaxBytes: 1 << 30, Duplicates: 2 * time.Minute,
	}); err != nil {
		b.Fatal(err)
	}
	ob, err := outbox.Open(filepath.Join(b.TempDir(), "naive.db"), outbox.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer ob.Close()
	cons, err := js.CreateOrUpdateConsumer(ctx, "L2A", jetstream.ConsumerConfig{
		Durable: "bench-naive", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4096, AckWait: 30 * time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	iter, err := cons.Messages()
	if err != nil {
		b.Fatal(err)
	}
	defer iter.Stop()
	// The naive loop signs each receipt as d does (unless
	// -leafline.unsigned), with the same derived-once key.
	var signer *receipts.Signer
	if !*benchUnsigned {
		kp, err := nkeys.CreateUser()
		if err != nil {
			b.Fatal(err)
		}
		if signer, err = receipts.NewSigner(kp); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, n)
	ph := benchBegin("c_naive")
	for i := 0; i < n; i++ {
		m, err := iter.Next()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		id := m.Headers().Get(jetstream.MsgIDHeader)
		rec := benchReceipt(b, id)
		rec.Subject = "bench.naive.edge1.processed"
		ev := []sink.Event{{ID: id, Subject: m.Subject(), Data: m.Data()}}
		if _, err := ob.Commit([]outbox.Record{rec}, func(tx *bbolt.Tx) error { return sink.StoreSink{}.WriteTx(tx, ev) }); err != nil {
			b.Fatal(err)
		}
		rm := nats.NewMsg(rec.Subject)
		rm.Data = rec.Data
		rm.Header.Set(jetstream.MsgIDHeader, rec.Key)
		if signer != nil {
			rm.Header.Set(receipts.SignatureHeader, signer.Sign(rec.Data))
		}
		if _, err := js.PublishMsg(ctx, rm); err != nil {
			b.Fatal(err)
		}
		if err := ob.MarkPublished([]string{rec.Key}); err != nil {
			b.Fatal(err)
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	note := "store sink + outbox + signed receipt, like d"
	if signer == nil {
		note = "store sink + outbox, like d (unsigned)"
	}
	return ph.end("c", "naive: per msg bbolt tx + sync publish + mark + ACK", n, lat, note)
}

// benchE2ELatency reads the completion records of every 10th event and
// returns received_at(L1) - publish time.
func benchE2ELatency(b *testing.B, env *benchEnv, at []time.Time, processor string) []time.Duration {
	store := env.ls.App("l1").Completions().Store()
	var lat []time.Duration
	for i := 0; i < len(at); i += 10 {
		c, err := store.Get(context.Background(), benchID("e")(i))
		if err != nil {
			b.Fatalf("completion of %s: %v", benchID("e")(i), err)
		}
		if p, ok := c.Processors[processor]; ok {
			lat = append(lat, p.ReceivedAt.Sub(at[i]))
		}
	}
	return lat
}

// benchRSSRun: (r) an edge as a separate `leafline run` process (SyncAlways)
// draining n events preloaded (sync 2m) in its events stream, link up;
// peak RSS is the child's VmHWM, CPU from its /proc stat.
func benchRSSRun(b *testing.B, n int, payload []byte) benchRow {
	ctx := context.Background()
	dir := b.TempDir()
	bin := *benchRSSBin
	if bin == "" {
		bin = filepath.Join(dir, "leafline")
		build := exec.Command("go", "build", "-o", bin, "../cmd/leafline")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build: %v\n%s", err, out)
		}
	}
	env := newBenchEnv(b, filepath.Join(dir, "sys"), 1, nil, nil)
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })
	t0 := time.Now()
	if err := benchPublish(ctx, env.js["l1"], n, payload, func(i int) string { return fmt.Sprintf("events.r.%d", i%8) }, benchID("r"), nil); err != nil {
		b.Fatal(err)
	}
	env.waitUntil("rss preload", 30*time.Minute, func() bool { return env.count("edge1", "L2A")() >= uint64(n) })
	// L1 is stopped for the drain: its origin tracker would otherwise work
	// through n origin events in this process, next to the child. The
	// edge's link (to the hub) stays up.
	env.nc["l1"].Close()
	delete(env.nc, "l1")
	if err := env.ls.Stop("l1"); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "bench: rss run: %d events preloaded in %.1fs (sync 2m)\n", n, time.Since(t0).Seconds())
	env.nc["edge1"].Close()
	delete(env.nc, "edge1")
	if err := env.ls.Stop("edge1"); err != nil {
		b.Fatal(err)
	}
	time.Sleep(*benchRSSAge)
	// The edge's config, now SyncAlways, for a separate process.
	cfg := *env.ls.Configs["edge1"]
	cfg.JetStream.SyncInterval = "always"
	port := benchFreePort(b)
	cfg.NATS.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.Log.Level = "warn"
	opsPort := benchFreePort(b)
	cfg.Ops.Listen = fmt.Sprintf("127.0.0.1:%d", opsPort)
	cfg.Ops.Pprof = *benchRSSProf != ""
	cfg.TopologyFile = "topology.json"
	tdata, err := json.MarshalIndent(env.ls.Topology, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	cdata, err := json.MarshalIndent(&cfg, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "topology.json"), tdata, 0o644); err != nil {
		b.Fatal(err)
	}
	cpath := filepath.Join(dir, "edge1.json")
	if err := os.WriteFile(cpath, cdata, 0o644); err != nil {
		b.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "edge1.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "--config", cpath)
	cmd.Env = os.Environ()
	if *benchRSSLimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+*benchRSSLimit)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	var js jetstream.JetStream
	env.waitUntil("edge process up", time.Minute, func() bool {
		nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.MaxReconnects(-1))
		if err != nil {
			return false
		}
		js, _ = jetstream.New(nc)
		b.Cleanup(nc.Close)
		return true
	})
	cpu0 := benchProcCPU(pid)
	var peakRSS, peakAnon, peakFile, peakHeap, peakGoSys int64
	var lastProf time.Time
	var drained time.Time
	env.waitUntil("edge process drained", 60*time.Minute, func() bool {
		peakRSS = max(peakRSS, benchStatusKB(pid, "VmRSS"))
		peakAnon = max(peakAnon, benchStatusKB(pid, "RssAnon"))
		peakFile = max(peakFile, benchStatusKB(pid, "RssFile"))
		heap, sys := benchGoMem(fmt.Sprintf("http://127.0.0.1:%d/metrics", opsPort))
		if *benchRSSProf != "" && heap > peakHeap && time.Since(lastProf) > 2*time.Second {
			lastProf = time.Now()
			benchFetch(b, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap", opsPort), *benchRSSProf)
		}
		peakHeap, peakGoSys = max(peakHeap, heap), max(peakGoSys, sys)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := js.Consumer(cctx, "L2A", env.ls.Configs["edge1"].Delivery.Consumer)
		if err != nil {
			return false
		}
		ci := c.CachedInfo()
		if ci.AckFloor.Stream >= uint64(n) && ci.NumAckPending == 0 && ci.NumPending == 0 {
			drained = time.Now()
			return true
		}
		return false
	})
	cpu := benchProcCPU(pid) - cpu0
	hwm := benchStatusKB(pid, "VmHWM")
	limitNote := ""
	if *benchRSSLimit != "" {
		limitNote = "; GOMEMLIMIT=" + *benchRSSLimit
	}
	return benchRow{key: "r", what: "edge as separate process draining backlog (link up)", n: n,
		dur: drained.Sub(start), cpu: cpu, rssKB: hwm, flushes: -1,
		note: fmt.Sprintf("child VmHWM; sampled max MiB: VmRSS %.0f RssAnon %.0f RssFile %.0f go_heap_inuse %.0f go_sys %.0f; time incl. startup%s",
			float64(peakRSS)/1024, float64(peakAnon)/1024, float64(peakFile)/1024, float64(peakHeap)/(1<<20), float64(peakGoSys)/(1<<20), limitNote)}
}

// benchFetch writes the body of GET url to path.
func benchFetch(b *testing.B, url, path string) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
}

// benchGoMem reads go_memstats_heap_inuse_bytes and go_memstats_sys_bytes
// from a Prometheus endpoint (0, 0 on any error).
func benchGoMem(url string) (heap, sys int64) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "go_memstats_heap_inuse_bytes":
			heap = int64(v)
		case "go_memstats_sys_bytes":
			sys = int64(v)
		}
	}
	return heap, sys
}

func benchProcCPU(pid string) time.Duration {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// fields after ")": state(0) ... utime(11) stime(12), in clock ticks (100/s)
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

func benchFreePort(b *testing.B) int {
	ports, err := loopback.FreePorts(1)
	if err != nil {
		b.Fatal(err)
	}
	return ports[0]
}

// benchSigning: (k) the CPU cost of signing receipts at the edge
// (receipts.Sign with an nkey, as the runner's publisher does) and of
// verifying them at L1, one goroutine each.
func benchSigning(b *testing.B, n int) []benchRow {
	n = min(n, 20_000)
	kp, err := nkeys.CreateUser()
	if err != nil {
		b.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	data := make([][]byte, n)
	for i := range data {
		data[i] = benchReceipt(b, fmt.Sprintf("k-%08d", i)).Data
	}
	sigs := make([]string, n)
	ph := benchBegin("k_sign")
	for i := range data {
		if sigs[i], err = receipts.Sign(kp, data[i]); err != nil {
			b.Fatal(err)
		}
	}
	r1 := ph.end("k", "receipts.Sign (nkeys ed25519), 1 goroutine", n, nil, "edge CPU per receipt")
	signer, err := receipts.NewSigner(kp)
	if err != nil {
		b.Fatal(err)
	}
	ph = benchBegin("k_signer")
	for i := range data {
		if sig := signer.Sign(data[i]); sig != sigs[i] {
			b.Fatalf("receipts.Signer: signature %d differs from receipts.Sign", i)
		}
	}
	r3 := ph.end("k3", "receipts.Signer.Sign (key derived once), 1 goroutine", n, nil, "a receipt signed on its own; same signatures as k")
	const batch = 256
	bsigs, proofs := make([]string, n), make([]string, n)
	ph = benchBegin("k_batch")
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		ss, ps := signer.SignBatch(data[lo:hi])
		copy(bsigs[lo:hi], ss)
		copy(proofs[lo:hi], ps)
	}
	r4 := ph.end("k4", "receipts.Signer.SignBatch, batches of 256, 1 goroutine", n, nil, "what the runner uses: one signature per 16 receipts")
	v := receipts.NewVerifier()
	ph = benchBegin("k_batch_verify")
	for i := range data {
		if err := v.Verify(pub, data[i], bsigs[i], proofs[i]); err != nil {
			b.Fatal(err)
		}
	}
	r5 := ph.end("k5", "receipts.Verifier.Verify, batches of 256, 1 goroutine", n, nil, "L1 CPU per batch-signed receipt")
	ph = benchBegin("k_verify")
	for i := range data {
		if err := receipts.VerifySignature(pub, data[i], sigs[i]); err != nil {
			b.Fatal(err)
		}
	}
	r2 := ph.end("k2", "receipts.VerifySignature, 1 goroutine", n, nil, "L1 CPU per receipt")
	return []benchRow{r1, r3, r2, r4, r5}
}

// benchOutboxKeys: (x, on request) the outbox's bbolt cost per batch of 256
// as the runner uses it (Commit with the store sink's records, then
// MarkPublished), with the real receipt keys (sha256 hex: random order) and
// with keys in insertion order, on n records. Nothing else runs.
func benchOutboxKeys(b *testing.B, n int) []benchRow {
	var rows []benchRow
	for _, v := range []struct {
		key  string
		name string
		id   func(i int) string
	}{
		{"x", "outbox Commit+Mark per 256, receipt keys (random)", func(i int) string { return benchReceipt(b, fmt.Sprintf("x-%08d", i)).Key }},
		{"x2", "outbox Commit+Mark per 256, sequential keys", func(i int) string { return fmt.Sprintf("rcpt-%012d", i) }},
	} {
		ob, err := outbox.Open(filepath.Join(b.TempDir(), "x.db"), outbox.Options{})
		if err != nil {
			b.Fatal(err)
		}
		data := benchReceipt(b, "x").Data
		payload := benchPayload(*benchSize)
		var commit, mark time.Duration
		batches := 0
		ph := benchBegin(v.key)
		for i := 0; i < n; i += 256 {
			k := min(256, n-i)
			recs := make([]outbox.Record, k)
			evs := make([]sink.Event, k)
			keys := make([]string, k)
			for j := range recs {
				recs[j] = outbox.Record{Key: v.id(i + j), Subject: "leafline.receipts.edge1.processed", Data: data}
				keys[j] = recs[j].Key
				evs[j] = sink.Event{ID: benchID("b")(i + j), Subject: "events.b.s.1", Data: payload}
			}
			t0 := time.Now()
			if _, err := ob.Commit(recs, func(tx *bbolt.Tx) error { return sink.StoreSink{}.WriteTx(tx, evs) }); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := ob.MarkPublished(keys); err != nil {
				b.Fatal(err)
			}
			commit += t1.Sub(t0)
			mark += time.Since(t1)
			batches++
		}
		r := ph.end(v.key, v.name, n, nil, fmt.Sprintf("per batch: commit %.1fms mark %.1fms",
			float64(commit)/float64(batches)/1e6, float64(mark)/float64(batches)/1e6))
		ob.Close()
		rows = append(rows, r)
	}
	rows = append(rows, benchSeqLayout(b, n))
	return rows
}

// benchSeqLayout (x3) is a sketch, in plain bbolt, of an outbox layout whose
// writes are mostly appends: records keyed by big-endian Seq (never
// rewritten), a small Key -> Seq index for the "stored once" lookup,
// pending and published indexes keyed by Seq; MarkPublished touches only
// the two indexes. Same batches, same store-sink records (random event ids)
// as x.
func benchSeqLayout(b *testing.B, n int) benchRow {
	db, err := bbolt.Open(filepath.Join(b.TempDir(), "x3.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	names := []string{"events", "records", "keys", "pending", "published"}
	if err := db.Update(func(tx *bbolt.Tx) error {
		for _, nm := range names {
			if _, err := tx.CreateBucketIfNotExists([]byte(nm)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	data := benchReceipt(b, "x").Data
	payload := benchPayload(*benchSize)
	be := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	var commit, mark time.Duration
	batches := 0
	ph := benchBegin("x3")
	for i := 0; i < n; i += 256 {
		k := min(256, n-i)
		keys := make([]string, k)
		evs := make([]sink.Event, k)
		for j := range keys {
			keys[j] = benchReceipt(b, fmt.Sprintf("x-%08d", i+j)).Key
			evs[j] = sink.Event{ID: benchID("b")(i + j), Subject: "events.b.s.1", Data: payload}
		}
		seqs := make([]uint64, k)
		t0 := time.Now()
		err := db.Update(func(tx *bbolt.Tx) error {
			if err := (sink.StoreSink{}).WriteTx(tx, evs); err != nil {
				return err
			}
			recs, idx, pend := tx.Bucket([]byte("records")), tx.Bucket([]byte("keys")), tx.Bucket([]byte("pending"))
			for j, key := range keys {
				if v := idx.Get([]byte(key)); v != nil {
					seqs[j] = binary.BigEndian.Uint64(v)
					continue
				}
				seq, _ := recs.NextSequence()
				seqs[j] = seq
				if err := recs.Put(be(seq), data); err != nil {
					return err
				}
				if err := idx.Put([]byte(key), be(seq)); err != nil {
					return err
				}
				if err := pend.Put(be(seq), nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		err = db.Update(func(tx *bbolt.Tx) error {
			pend, pub := tx.Bucket([]byte("pending")), tx.Bucket([]byte("published"))
			now := uint64(time.Now().UnixNano())
			for _, seq := range seqs {
				if err := pend.Delete(be(seq)); err != nil {
					return err
				}
				if err := pub.Put(append(be(now), be(seq)...), nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		commit += t1.Sub(t0)
		mark += time.Since(t1)
		batches++
	}
	return ph.end("x3", "sketch: Seq-keyed records + Key->Seq index (plain bbolt)", n, nil,
		fmt.Sprintf("per batch: commit %.1fms mark %.1fms", float64(commit)/float64(batches)/1e6, float64(mark)/float64(batches)/1e6))
}

// benchForward (g): the hop edge → hub for a receipts backlog, on two
// standalone servers (domains "gedge" and "ghub", SyncAlways, plain
// leafnode on loopback), measured two ways on the same n receipts:
//
//	g   durable sourcing as leafline configures it (durable push consumer
//	    with AckFlowControl, FlowControl, 1s heartbeat; MaxAckPending
//	    sourceMaxAckPending): the hub stores each sourced message on its
//	    own, one fsync per message;
//	g2  a forwarder sketch at the hub: a durable pull consumer on the
//	    edge's stream across the link (domain API), Fetch(1000), one atomic
//	    batch publish into the hub's stream (one fsync), then one ACK
//	    (AckAll) for the batch.
func benchForward(b *testing.B, n int) []benchRow {
	ctx := context.Background()
	dir := b.TempDir()
	hubOpts := &server.Options{ServerName: "ghub", Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		JetStreamDomain: "ghub", StoreDir: filepath.Join(dir, "hub"), SyncAlways: true, NoSigs: true}
	leafPort := benchFreePort(b)
	hubOpts.LeafNode.Host, hubOpts.LeafNode.Port = "127.0.0.1", leafPort
	hub, err := startServer(hubOpts, benchLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer hub.Shutdown()
	lu, _ := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort))
	edgeOpts := &server.Options{ServerName: "gedge", Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		JetStreamDomain: "gedge", StoreDir: filepath.Join(dir, "edge"), SyncAlways: true, NoSigs: true}
	edgeOpts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{lu}}}
	edgeSrv, err := startServer(edgeOpts, benchLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer edgeSrv.Shutdown()
	if err := waitFor(ctx, 30*time.Second, func() bool { return upstreamConnected(edgeSrv) }); err != nil {
		b.Fatal("bench g: leafnode did not connect")
	}
	enc, err := nats.Connect(edgeSrv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer enc.Close()
	ejs, _ := jetstream.New(enc)
	hnc, err := nats.Connect(hub.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer hnc.Close()
	hjs, _ := jetstream.New(hnc)
	if _, err := ejs.CreateStream(ctx, jetstream.StreamConfig{Name: "GRE", Subjects: []string{"grc.>"}, Storage: jetstream.FileStorage,
		AllowAtomicPublish: true, Discard: jetstream.DiscardNew, MaxBytes: 1 << 30}); err != nil {
		b.Fatal(err)
	}
	// Preload n receipts (atomic batches of 1000).
	var batch []*nats.Msg
	for i := 0; i < n; i++ {
		rec := benchReceipt(b, benchID("g")(i))
		m := nats.NewMsg("grc.edge.processed")
		m.Data = rec.Data
		m.Header.Set(jetstream.MsgIDHeader, rec.Key)
		batch = append(batch, m)
		if len(batch) == 1000 || i == n-1 {
			if _, err := jetstreamext.PublishMsgBatch(ctx, ejs, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	var rows []benchRow

	// g: durable sourcing.
	if _, err := ejs.CreateOrUpdateConsumer(ctx, "GRE", jetstream.ConsumerConfig{
		Durable: "src", DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckFlowControlPolicy,
		MaxAckPending: sourceMaxAckPending, DeliverSubject: "gdeliver.src", FlowControl: true, IdleHeartbeat: time.Second,
	}); err != nil {
		b.Fatal(err)
	}
	ph := benchBegin("g_sourcing")
	if _, err := hjs.CreateStream(ctx, jetstream.StreamConfig{Name: "GRH", Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew, MaxBytes: 1 << 30,
		Sources: []*jetstream.StreamSource{{Name: "GRE", External: &jetstream.ExternalStream{APIPrefix: "$JS.gedge.API"},
			Consumer: &jetstream.StreamConsumerSource{Name: "src", DeliverSubject: "gdeliver.src"}}}}); err != nil {
		b.Fatal(err)
	}
	if err := waitFor(ctx, 30*time.Minute, func() bool { return streamState(ctx, hjs, "GRH").Msgs >= uint64(n) }); err != nil {
		b.Fatal(err)
	}
	rows = append(rows, ph.end("g", "hop edge->hub: durable sourcing (SyncAlways)", n, nil, "as leafline's links; 1 fsync per msg"))

	// g2: forwarder sketch.
	if _, err := hjs.CreateStream(ctx, jetstream.StreamConfig{Name: "GFWD", Subjects: []string{"gfwd.>"}, Storage: jetstream.FileStorage,
		AllowAtomicPublish: true, Discard: jetstream.DiscardNew, MaxBytes: 1 << 30, Duplicates: 2 * time.Minute}); err != nil {
		b.Fatal(err)
	}
	rjs, err := jetstream.NewWithDomain(hnc, "gedge")
	if err != nil {
		b.Fatal(err)
	}
	cons, err := rjs.CreateOrUpdateConsumer(ctx, "GRE", jetstream.ConsumerConfig{Durable: "fwd", AckPolicy: jetstream.AckAllPolicy,
		MaxAckPending: 4000, MaxRequestBatch: 1000, AckWait: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, n)
	ph = benchBegin("g_forwarder")
	for got := 0; got < n; {
		start := time.Now()
		fb, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		var in []jetstream.Msg
		var out []*nats.Msg
		for m := range fb.Messages() {
			in = append(in, m)
			fm := nats.NewMsg("gfwd." + m.Subject())
			fm.Data = m.Data()
			fm.Header.Set(jetstream.MsgIDHeader, m.Headers().Get(jetstream.MsgIDHeader))
			out = append(out, fm)
		}
		if len(in) == 0 {
			continue
		}
		if _, err := jetstreamext.PublishMsgBatch(ctx, hjs, out); err != nil {
			b.Fatal(err)
		}
		if err := in[len(in)-1].Ack(); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		for range in {
			lat = append(lat, d)
		}
		got += len(in)
	}
	rows = append(rows, ph.end("g2", "hop edge->hub: forwarder sketch Fetch(1000)+atomic batch", n, lat, "1 fsync per batch; latency = batch"))
	return rows
}
