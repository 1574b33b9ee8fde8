//go:build linux

package bench

import (
	"fmt"
	"io"
	"os"
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
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/edge/runner"
)

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
	profDir string
}

func (b *tb) begin(name string) *benchPhase {
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset VmHWM
	p := &benchPhase{name: name, profDir: b.o.Profile}
	if dir := p.profDir; dir != "" {
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
		if f, err := os.Create(filepath.Join(p.profDir, p.name+".heap")); err == nil {
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
		// A bench stopped by a signal closes the systems under the
		// gauges: a gauge that fails then ends the sampling.
		defer func() { _ = recover() }()
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

// benchTrace receives an edge runner's contract steps (runner.Hooks.Trace),
// to count its ACKs, and each finished batch's stage times (runner.Hooks.OnBatch). Consecutive batches overlap in the runner's
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

// benchHist returns the sample sum and count of a box's histogram.
func benchHist(box *box.App, name string) (float64, uint64) {
	mfs, err := box.Metrics().Registry().Gather()
	if err != nil {
		return 0, 0
	}
	var sum float64
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return sum, n
}
