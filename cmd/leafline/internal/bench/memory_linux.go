//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/status"
	"github.com/leafline/leafline/topology"
)

// memoryWithin bounds each of memory's waits.
const memoryWithin = 60 * time.Minute

// memorySites are the boxes of memory, in the order they start.
var memorySites = []string{"l1", "hub", "edge1", "edge2"}

// memoryHubStream is the hub's jetstream.max_stream_bytes in memory's
// parked run: each edge's backlog budget, 3/4 of it, is then 1 GiB.
const memoryHubStream = 4 << 30 / 3

// memoryParkedSize and memoryParkedEvents shape memory's parked run: 8 KiB
// events, 10% more than the parked edge's 1 GiB budget at the hub holds.
const (
	memoryParkedSize   = 8 << 10
	memoryParkedEvents = 11 * (1 << 30) / 10 / memoryParkedSize
)

// memBox is what memory measured of one box's process.
type memBox struct {
	site string
	// anonKB and fileKB are the highest RssAnon and RssFile sampled
	// (every 500 ms), hwmKB its VmHWM at the end: kB.
	anonKB, fileKB, hwmKB int64
	// heapAfterGC is the Go heap in use after a GC at the end of the run,
	// limit the Go memory limit it ran under (0: none): bytes.
	heapAfterGC, limit int64
	// cpu is the CPU time it used from the publish until the end.
	cpu time.Duration
}

// memRun is one run of memory.
type memRun struct {
	key, label string
	n, size    int  // events and their payload bytes
	limits     bool // each box under its default memory limit
	parked     bool // edge2 never starts
	dur        time.Duration
	boxes      []memBox
	// haPeak is the most bytes the hub's HA held (sampled every 2 s).
	haPeak int64
}

func (m memRun) box(site string) memBox {
	for _, b := range m.boxes {
		if b.site == site {
			return b
		}
	}
	return memBox{site: site}
}

func (m memRun) eps() float64 { return float64(m.n) / max(m.dur.Seconds(), 1e-9) }

// memory is the phase memory: L1, a hub and two edges (store sinks, relay
// links) as four `leafline run` processes from one topology, as configs/
// lays them out. Four runs, each on new data dirs: Memory events of
// MemorySize bytes published at L1 until each is complete there, with
// each box under its role's default memory limit (row mem) and with none
// (mem_nolimit); a tenth as many under the limits (mem_small); and 1.1
// GiB of 8 KiB events with edge2 parked (never started) until edge1 has
// completed each (mem_parked), the hub's edge backlog budget 1 GiB so
// that it holds up to 1 GiB of edge2's events. Each box's peak anonymous
// and file-backed memory is sampled from /proc every 500 ms.
func (r *run) memory() {
	n, size := r.o.Memory, r.o.MemorySize
	r.m.Phase("memory four processes [relay]")
	runs := []memRun{
		{key: "mem", label: "default limits", n: n, size: size, limits: true},
		{key: "mem_nolimit", label: "no limits", n: n, size: size},
		{key: "mem_small", label: "default limits, a tenth of the events", n: max(n/10, 1), size: size, limits: true},
		{key: "mem_parked", label: "default limits, edge2 parked", n: memoryParkedEvents, size: memoryParkedSize, limits: true, parked: true},
	}
	for i := range runs {
		r.memoryRun(&runs[i])
		x := runs[i]
		var cpu time.Duration
		for _, b := range x.boxes {
			cpu += b.cpu
		}
		r.rows = append(r.rows, benchRow{key: x.key, what: fmt.Sprintf("four processes, %s, %d B events: publish -> complete at L1 [relay]", x.label, x.size),
			n: x.n, dur: x.dur, cpu: cpu, flushes: -1, rssKB: x.box("l1").hwmKB, note: memNote(x)})
	}
	r.memories = runs
}

// memNote is a run's row note: each box's peaks.
func memNote(x memRun) string {
	var parts []string
	for _, b := range x.boxes {
		limit := "none"
		if b.limit > 0 {
			limit = fmt.Sprintf("%d", b.limit>>20)
		}
		parts = append(parts, fmt.Sprintf("%s anon %d file %d hwm %d heap-after-gc %d limit %s cpu-s/1k %.3f",
			b.site, b.anonKB>>10, b.fileKB>>10, b.hwmKB>>10, b.heapAfterGC>>20, limit, b.cpu.Seconds()/float64(x.n)*1000))
	}
	if x.parked {
		parts = append(parts, fmt.Sprintf("HA peak %d", x.haPeak>>20))
	}
	return "MiB: " + strings.Join(parts, "; ")
}

// memoryRun lays out a system, starts its boxes as processes, publishes
// x.n events at L1 and samples each process until they are complete.
func (r *run) memoryRun(x *memRun) {
	// The boxes die with the bench, however it ends: the signal follows
	// the OS thread that starts them, which this goroutine keeps.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	room := int64(x.n) * int64(x.size+1024) * 3 / 2
	sites := memorySites
	if x.parked {
		sites = sites[:3]
	}
	sys := r.startFour(x.label, sites, func(site string, c *topology.Config) {
		c.JetStream.MaxStreamBytes = max(c.JetStream.MaxStreamBytes, room)
		if site == "hub" && x.parked {
			c.JetStream.MaxStreamBytes = memoryHubStream
		}
		c.MemoryLimitBytes = 0
		if !x.limits {
			c.MemoryLimitBytes = -1
		}
		c.Ops.Pprof = true // for the heap after a GC
	})
	defer sys.stop()
	env, ops, pids := sys.env, sys.ops, sys.pids
	l1 := r.dial(env.ls.Configs["l1"].NATS.Listen)
	hub := r.dial(env.ls.Configs["hub"].NATS.Listen)

	var done atomic.Int64
	r.m.Track(x.label+": published -> complete at L1", "events", int64(x.n), done.Load)
	sampler := newMemSampler(pids, hub)
	stop := sampler.run(r.ctx)
	js, _ := jetstream.New(l1)
	payload := benchPayload(x.size)
	cpu0 := map[string]time.Duration{}
	for site, pid := range pids {
		cpu0[site] = benchProcCPU(pid)
	}
	start := time.Now()
	pubErr := make(chan error, 1)
	go func() {
		pubErr <- benchPublishBatched(r.ctx, js, x.n, payload, func(i int) string { return fmt.Sprintf("events.mem.%d", i%8) }, r.id(x.key), nil)
	}()
	sc := status.NewStatusClient(l1, "")
	env.waitUntil(x.label+": complete at L1", memoryWithin, func() bool {
		select {
		case err := <-pubErr:
			if err != nil {
				r.Fatalf("bench: memory %s: publish: %v", x.label, err)
			}
		default:
		}
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		defer cancel()
		sum, err := sc.Summary(ctx)
		if err != nil {
			return false
		}
		if !x.parked {
			done.Store(sum.Complete)
			return sum.Complete >= int64(x.n)
		}
		i := slices.IndexFunc(sum.Sites, func(s record.SiteSummary) bool { return s.Site == "edge1" })
		if i < 0 || sum.Events < int64(x.n) {
			return false
		}
		done.Store(sum.Events - sum.Sites[i].Pending)
		return sum.Sites[i].Pending == 0
	})
	x.dur = time.Since(start)
	stop()
	for _, site := range sites {
		b := sampler.peak(site)
		b.hwmKB = benchStatusKB(pids[site], "VmHWM")
		b.cpu = benchProcCPU(pids[site]) - cpu0[site]
		b.heapAfterGC, b.limit = heapAfterGC(r.tb, ops[site])
		x.boxes = append(x.boxes, b)
	}
	x.haPeak = sampler.haPeak.Load()
}

// fourBoxes is a system of memorySites started as processes.
type fourBoxes struct {
	env  *benchEnv
	ops  map[string]int    // each box's ops port
	pids map[string]string // each started box's pid
	// stop stops every started box: SIGTERM, then a kill.
	stop func()
}

// startFour lays out l1, a hub and two edges (store sinks, relay links)
// as configs/ does, each config changed by tweak, starts the boxes of
// sites as `leafline run` processes (stopped when the run ends) and waits
// until each is ready. The caller holds its OS thread (Pdeathsig).
func (r *run) startFour(label string, sites []string, tweak func(site string, c *topology.Config)) fourBoxes {
	r.m.Track(label+": start four processes", "", 0, nil)
	dir := r.TempDir()
	env := newBenchEnv(r.tb, dir, 2, nil, map[string]string{"edge1": "store", "edge2": "store"}, topology.TransportRelay)
	var stops []func()
	sys := fourBoxes{env: env, ops: map[string]int{}, pids: map[string]string{}, stop: func() {
		for _, stop := range slices.Backward(stops) {
			stop()
		}
	}}
	for _, site := range memorySites {
		c := env.ls.Configs[site]
		c.JetStream.SyncInterval = "always"
		// Ports of their own, and each link straight to its upstream,
		// without the bench's fault proxy.
		c.NATS.Listen = fmt.Sprintf("127.0.0.1:%d", benchFreePort(r.tb))
		if s, _ := env.ls.Topology.Site(site); s.Upstream != "" {
			up, _ := env.ls.Topology.Site(s.Upstream)
			c.Leafnode.UpstreamURL = "nats-leaf://" + up.Leafnode.Listen
		}
		sys.ops[site] = benchFreePort(r.tb)
		c.Ops.Listen = fmt.Sprintf("127.0.0.1:%d", sys.ops[site])
		c.Log.Level = "warn"
		c.TopologyFile = "topology.json"
		tweak(site, c)
	}
	env.validate()
	r.writeSystem(env, dir)
	for _, site := range sites {
		pid, stop := startBoxProcess(r.tb, filepath.Join(dir, site+".json"), memoryEnv())
		stops = append(stops, stop)
		sys.pids[site] = pid
	}
	for _, site := range sites {
		url := fmt.Sprintf("http://127.0.0.1:%d/readyz", sys.ops[site])
		env.waitUntil(site+" ready", 2*time.Minute, func() bool { return httpOK(url) })
	}
	return sys
}

// writeSystem writes env's topology and each box's config into dir, as
// topology.json and <site>.json.
func (r *run) writeSystem(env *benchEnv, dir string) {
	write := func(name string, v any) {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			r.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			r.Fatal(err)
		}
	}
	write("topology.json", env.ls.Topology)
	for site, c := range env.ls.Configs {
		write(site+".json", c)
	}
}

// dial connects to a box's client listener; the connection closes with
// the run.
func (r *run) dial(addr string) *nats.Conn {
	nc, err := nats.Connect("nats://"+addr, nats.MaxReconnects(-1))
	if err != nil {
		r.Fatal(err)
	}
	r.Cleanup(nc.Close)
	return nc
}

// memoryEnv is the boxes' environment: the bench's, without a
// GOMEMLIMIT that would replace their roles' defaults.
func memoryEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOMEMLIMIT=") })
}

func httpOK(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// heapAfterGC has the box behind opsPort collect its garbage (the heap
// profile's gc=1) and then reads its Go heap in use and memory limit.
func heapAfterGC(b *tb, opsPort int) (heap, limit int64) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", opsPort))
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	m := benchMetrics(fmt.Sprintf("http://127.0.0.1:%d/metrics", opsPort), "go_memstats_heap_alloc_bytes", "go_gc_gomemlimit_bytes")
	heap, limit = int64(m[0]), int64(m[1])
	if limit >= 1<<62 {
		limit = 0
	}
	return heap, limit
}

// memSampler samples the boxes' memory from /proc every 500 ms, and the
// hub's HA every 2 s.
type memSampler struct {
	pids  map[string]string
	hub   *nats.Conn
	mu    sync.Mutex
	peaks map[string]*memBox
	// haPeak is the most bytes HA held.
	haPeak atomic.Int64
}

func newMemSampler(pids map[string]string, hub *nats.Conn) *memSampler {
	s := &memSampler{pids: pids, hub: hub, peaks: map[string]*memBox{}}
	for site := range pids {
		s.peaks[site] = &memBox{site: site}
	}
	return s
}

// run samples until the returned stop is called.
func (s *memSampler) run(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		js, _ := jetstream.New(s.hub)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			s.sample()
			if i%4 == 0 {
				sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
				if st, err := js.Stream(sctx, "HA"); err == nil {
					s.haPeak.Store(max(s.haPeak.Load(), int64(st.CachedInfo().State.Bytes)))
				}
				scancel()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done; s.sample() }
}

func (s *memSampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for site, pid := range s.pids {
		p := s.peaks[site]
		p.anonKB = max(p.anonKB, benchStatusKB(pid, "RssAnon"))
		p.fileKB = max(p.fileKB, benchStatusKB(pid, "RssFile"))
	}
}

func (s *memSampler) peak(site string) memBox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.peaks[site]
}

// startBoxProcess starts `leafline run` on cpath with environment env,
// its output in a log beside it (<config>.log), and returns its pid and
// how to stop it: SIGTERM, then a kill after 30s (1s once the bench is
// stopped). The caller holds its OS thread (Pdeathsig).
func startBoxProcess(b *tb, cpath string, env []string) (pid string, stop func()) {
	logf, err := os.Create(strings.TrimSuffix(cpath, ".json") + ".log")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(b.o.RSSBin, "run", "--config", cpath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill() })
	var once sync.Once
	return strconv.Itoa(cmd.Process.Pid), func() {
		once.Do(func() {
			defer logf.Close()
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			// A stopped bench does not wait for the box's clean stop.
			wait := 30 * time.Second
			if b.ctx.Err() != nil {
				wait = time.Second
			}
			select {
			case <-done:
			case <-time.After(wait):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
}

// memoryFigures prints memory's result and returns its figures: each
// role's peak anonymous memory under its default limit at Memory events,
// the rate under the limits over the rate without, how much each role's
// peak grew from a tenth of the events, and the hub's peaks with an edge
// parked.
func (r *run) memoryFigures() []Figure {
	if len(r.memories) != 4 {
		return nil
	}
	full, none, small, parked := r.memories[0], r.memories[1], r.memories[2], r.memories[3]
	edgeAnon := func(m memRun) int64 { return max(m.box("edge1").anonKB, m.box("edge2").anonKB) }
	mib := func(kb int64) float64 { return float64(kb) / 1024 }
	growth := 0.0
	for _, site := range memorySites {
		if s := small.box(site).anonKB; s > 0 {
			growth = max(growth, float64(full.box(site).anonKB)/float64(s))
		}
	}
	fmt.Fprintf(r.out, "memory: %d events of %d B, four processes: peak anonymous MiB under the default limits l1 %.0f hub %.0f edges %.0f (file-backed l1 %.0f hub %.0f edges %.0f); without limits l1 %.0f hub %.0f edges %.0f; %.0f events/s with the limits, %.0f without (ratio %.3f); at %d events l1 %.0f hub %.0f edges %.0f (largest growth to %d: %.3fx); edge2 parked (%d events of %d B), HA at %d MiB: hub peak anonymous %.0f MiB, VmHWM %.0f MiB\n",
		full.n, r.o.MemorySize, mib(full.box("l1").anonKB), mib(full.box("hub").anonKB), mib(edgeAnon(full)),
		mib(full.box("l1").fileKB), mib(full.box("hub").fileKB), mib(max(full.box("edge1").fileKB, full.box("edge2").fileKB)),
		mib(none.box("l1").anonKB), mib(none.box("hub").anonKB), mib(edgeAnon(none)),
		full.eps(), none.eps(), full.eps()/none.eps(),
		small.n, mib(small.box("l1").anonKB), mib(small.box("hub").anonKB), mib(edgeAnon(small)), full.n, growth,
		parked.n, parked.size, parked.haPeak>>20, mib(parked.box("hub").anonKB), mib(parked.box("hub").hwmKB))
	return []Figure{
		{"mem_l1_anon_mib", mib(full.box("l1").anonKB)}, {"mem_hub_anon_mib", mib(full.box("hub").anonKB)},
		{"mem_edge_anon_mib", mib(edgeAnon(full))}, {"mem_l1_heap_after_gc_mib", float64(full.box("l1").heapAfterGC) / (1 << 20)},
		{"mem_eps", full.eps()}, {"mem_eps_nolimit", none.eps()}, {"mem_eps_ratio", full.eps() / none.eps()},
		{"mem_l1_anon_mib_nolimit", mib(none.box("l1").anonKB)}, {"mem_growth", growth},
		{"mem_parked_ha_mib", float64(parked.haPeak >> 20)}, {"mem_parked_hub_anon_mib", mib(parked.box("hub").anonKB)},
		{"mem_parked_hub_hwm_mib", mib(parked.box("hub").hwmKB)},
	}
}
