//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/loopback"
)

// benchRSSRun: (r) an edge as a separate `leafline run` process (SyncAlways)
// draining n events preloaded (sync 2m) in its events stream, link up;
// peak RSS is the child's VmHWM, CPU from its /proc stat.
func benchRSSRun(b *tb, n int, payload []byte) benchRow {
	ctx := b.ctx
	dir := b.TempDir()
	env := newBenchEnv(b, filepath.Join(dir, "sys"), 1, nil, nil, b.o.Transports[0])
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })
	t0 := time.Now()
	b.m.Track("preload the edge", "events", int64(n), since(env.count("edge1", "L2A")))
	if err := benchPublish(ctx, env.js["l1"], n, payload, func(i int) string { return fmt.Sprintf("events.r.%d", i%8) }, b.id("r"), nil); err != nil {
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
	fmt.Fprintf(b.o.Out, "bench: rss run: %d events preloaded in %.1fs (sync 2m)\n", n, time.Since(t0).Seconds())
	env.nc["edge1"].Close()
	delete(env.nc, "edge1")
	if err := env.ls.Stop("edge1"); err != nil {
		b.Fatal(err)
	}
	b.m.Waiting("the preload ages", b.o.RSSAge)
	b.sleep(b.o.RSSAge)
	cpath, port, opsPort := rssConfig(b, env, dir)
	return rssChild(b, env, n, cpath, port, opsPort)
}

// rssConfig writes the edge's config, now SyncAlways, and the topology
// for a separate process into dir; it returns the config's path and the
// process's client and ops ports.
func rssConfig(b *tb, env *benchEnv, dir string) (cpath string, port, opsPort int) {
	cfg := *env.ls.Configs["edge1"]
	cfg.JetStream.SyncInterval = "always"
	port = benchFreePort(b)
	cfg.NATS.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.Log.Level = "warn"
	opsPort = benchFreePort(b)
	cfg.Ops.Listen = fmt.Sprintf("127.0.0.1:%d", opsPort)
	cfg.Ops.Pprof = b.o.RSSProfile != ""
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
	cpath = filepath.Join(dir, "edge1.json")
	if err := os.WriteFile(cpath, cdata, 0o644); err != nil {
		b.Fatal(err)
	}
	return cpath, port, opsPort
}

// rssChild runs the edge process on cpath until it has drained its n
// events, and measures its peak memory and CPU.
func rssChild(b *tb, env *benchEnv, n int, cpath string, port, opsPort int) benchRow {
	// The edge process dies with the bench, however the bench ends. The
	// signal follows the OS thread that starts the child: this goroutine
	// keeps it until the child is waited for.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	penv := os.Environ()
	if b.o.RSSMemLimit != "" {
		penv = append(penv, "GOMEMLIMIT="+b.o.RSSMemLimit)
	}
	pid, stop := startBoxProcess(b, cpath, penv)
	defer stop()
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
	var pk rssPeaks
	drained := pk.untilDrained(b, env, js, pid, opsPort, n)
	cpu := benchProcCPU(pid) - cpu0
	hwm := benchStatusKB(pid, "VmHWM")
	limitNote := ""
	if b.o.RSSMemLimit != "" {
		limitNote = "; GOMEMLIMIT=" + b.o.RSSMemLimit
	}
	return benchRow{key: "r", what: "edge as separate process draining backlog (link up)", n: n,
		dur: drained.Sub(start), cpu: cpu, rssKB: hwm, flushes: -1,
		note: fmt.Sprintf("child VmHWM; sampled max MiB: VmRSS %.0f RssAnon %.0f RssFile %.0f go_heap_inuse %.0f go_sys %.0f; time incl. startup%s",
			float64(pk.rss)/1024, float64(pk.anon)/1024, float64(pk.file)/1024, float64(pk.heap)/(1<<20), float64(pk.goSys)/(1<<20), limitNote)}
}

// rssPeaks are the highest of the edge process's memory figures sampled:
// kB from /proc (rss, anon, file) and bytes from its metrics (heap, goSys).
type rssPeaks struct {
	rss, anon, file, heap, goSys int64
	lastProf                     time.Time
}

// untilDrained samples the edge process pid until its sink consumer has
// ACKed all n events, and returns when it had.
func (pk *rssPeaks) untilDrained(b *tb, env *benchEnv, js jetstream.JetStream, pid string, opsPort, n int) time.Time {
	var drained time.Time
	var acked atomic.Int64
	b.m.Track("the edge process drains", "events ACKed", int64(n), acked.Load)
	env.waitUntil("edge process drained", 60*time.Minute, func() bool {
		pk.rss = max(pk.rss, benchStatusKB(pid, "VmRSS"))
		pk.anon = max(pk.anon, benchStatusKB(pid, "RssAnon"))
		pk.file = max(pk.file, benchStatusKB(pid, "RssFile"))
		heap, sys := benchGoMem(fmt.Sprintf("http://127.0.0.1:%d/metrics", opsPort))
		if b.o.RSSProfile != "" && heap > pk.heap && time.Since(pk.lastProf) > 2*time.Second {
			pk.lastProf = time.Now()
			benchFetch(b, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap", opsPort), b.o.RSSProfile)
		}
		pk.heap, pk.goSys = max(pk.heap, heap), max(pk.goSys, sys)
		cctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		defer cancel()
		c, err := js.Consumer(cctx, "L2A", env.ls.Configs["edge1"].Delivery.Consumer)
		if err != nil {
			return false
		}
		ci := c.CachedInfo()
		acked.Store(int64(ci.AckFloor.Stream))
		if ci.AckFloor.Stream >= uint64(n) && ci.NumAckPending == 0 && ci.NumPending == 0 {
			drained = time.Now()
			return true
		}
		return false
	})
	return drained
}

// benchFetch writes the body of GET url to path.
func benchFetch(b *tb, url, path string) {
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
	m := benchMetrics(url, "go_memstats_heap_inuse_bytes", "go_memstats_sys_bytes")
	return int64(m[0]), int64(m[1])
}

// benchMetrics reads the unlabelled samples names from a Prometheus
// endpoint, in their order (0 for each it lacks, or on any error).
func benchMetrics(url string, names ...string) []float64 {
	out := make([]float64, len(names))
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		// A metric with labels counts under its name: the sum of its
		// series.
		name, _, _ := strings.Cut(f[0], "{")
		if i := slices.Index(names, name); i >= 0 {
			v, _ := strconv.ParseFloat(f[1], 64)
			out[i] += v
		}
	}
	return out
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

func benchFreePort(b *tb) int {
	ports, err := loopback.FreePorts(1)
	if err != nil {
		b.Fatal(err)
	}
	return ports[0]
}
