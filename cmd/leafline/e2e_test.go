//go:build unix

// The end-to-end test stops boxes with SIGTERM and kills them with SIGKILL:
// os.Process.Signal sends only Kill on Windows, so it runs on Unix only.

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"

	"github.com/leafline/leafline/internal/memlimit"
	"github.com/leafline/leafline/topology"
)

// buildBinary builds leafline once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs real processes; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "leafline")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

type proc struct {
	t    *testing.T
	bin  string
	cfg  string
	log  string
	cmd  *exec.Cmd
	ops  int
	nats int
}

func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd = exec.Command(p.bin, "run", "--config", p.cfg)
	// The boxes' memory limits come from their configs, not from the
	// environment the tests run in.
	p.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOMEMLIMIT=") })
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	f.Close()
	waitHTTP(p.t, fmt.Sprintf("http://127.0.0.1:%d/readyz", p.ops), p.log)
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(sig)
		p.cmd.Wait()
		p.cmd = nil
	}
}

func waitHTTP(t *testing.T, url, log string) {
	t.Helper()
	check.For(t, 60*time.Second, 100*time.Millisecond, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := os.ReadFile(log)
			return fmt.Errorf("%s answers %s; log:\n%s", url, resp.Status, b)
		}
		return nil
	})
}

// metric reads one sample of a metric family from a box's /metrics.
func metric(t *testing.T, ops int, name string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", ops))
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return -1
}

// TestE2E_SIGKILLEdge runs L1, hub and edge as real `leafline run`
// processes, SIGKILLs the edge in the middle of a backlog, restarts it on
// the same data dir, and checks that every event completes exactly once.
func TestE2E_SIGKILLEdge(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	l1Leaf, hubLeaf := freePort(t), freePort(t)
	writeJSONFile(t, filepath.Join(dir, "topology.json"), map[string]any{
		"sites": []map[string]any{
			{"name": "l1", "role": "l1", "leafnode": map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", l1Leaf)}},
			{"name": "hub", "role": "hub", "upstream": "l1", "leafnode": map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", hubLeaf)}},
			{"name": "edge1", "role": "edge", "upstream": "hub"},
		},
	})
	procs := map[string]*proc{}
	for _, site := range []string{"l1", "hub", "edge1"} {
		p := &proc{t: t, bin: bin, cfg: filepath.Join(dir, site+".json"), log: filepath.Join(dir, site+".log"),
			ops: freePort(t), nats: freePort(t)}
		cfg := map[string]any{
			"topology": "topology.json",
			"site":     site,
			"data_dir": filepath.Join(dir, site),
			"nats":     map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", p.nats)},
			"ops":      map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", p.ops)},
		}
		if site == "edge1" {
			// Small batches so that the kill lands mid-stream.
			cfg["delivery"] = map[string]any{"batch_size": 8}
			cfg["ops"].(map[string]any)["pprof"] = true
		}
		writeJSONFile(t, p.cfg, cfg)
		procs[site] = p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.signal(syscall.SIGTERM)
		}
	})
	for _, site := range []string{"l1", "hub", "edge1"} {
		procs[site].start()
	}
	// Each box runs under its role's memory limit, or the one its
	// environment (GOMEMLIMIT, a control group) gives every process here.
	for _, site := range []string{"l1", "hub", "edge1"} {
		cfg, err := topology.LoadConfig(procs[site].cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := memlimit.For(cfg).Bytes
		if want == 0 {
			want = math.MaxInt64
		}
		if got := metric(t, procs[site].ops, "go_gc_gomemlimit_bytes"); got != float64(want) {
			t.Fatalf("%s: go_gc_gomemlimit_bytes = %v, want %v", site, got, want)
		}
	}
	// ops.pprof serves the runtime's profiles where it is set, only there.
	for site, want := range map[string]int{"edge1": http.StatusOK, "hub": http.StatusNotFound} {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?debug=1", procs[site].ops))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusOK && !strings.Contains(string(body), "heap profile")) {
			t.Fatalf("%s: GET /debug/pprof/heap: %d (want %d) %.80q", site, resp.StatusCode, want, body)
		}
	}

	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", procs["l1"].nats))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	const n = 3000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("kill9-%d", i)
		m := nats.NewMsg("events.e2e")
		m.Header.Set(jetstream.MsgIDHeader, ids[i])
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()

	edge := procs["edge1"]
	check.For(t, 60*time.Second, 20*time.Millisecond, func() error {
		if n := metric(t, edge.ops, "leafline_messages_acked_total"); n < 200 {
			return fmt.Errorf("the edge has ACKed %v events, want 200 before the kill", n)
		}
		return nil
	})
	acked := metric(t, edge.ops, "leafline_messages_acked_total")
	edge.signal(syscall.SIGKILL)
	t.Logf("SIGKILLed the edge after %v ACKs", acked)
	if acked >= n {
		t.Fatalf("the edge finished before the kill (%v ACKs); the test proves nothing", acked)
	}
	edge.start()

	store := status.NewStatusClient(nc, "") // the L1 box's status service
	l1 := procs["l1"]
	check.For(t, 120*time.Second, 100*time.Millisecond, func() error {
		if got := metric(t, l1.ops, "leafline_completion_applied_total"); got < n {
			return fmt.Errorf("applied %v of %d", got, n)
		}
		return nil
	})
	for _, id := range ids {
		c, err := store.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("event %s: %v", id, err)
		}
		if c.Processors["edge1"].Status != receipt.StatusProcessed {
			t.Fatalf("event %s: %+v", id, c.Processors)
		}
	}
	if got := metric(t, l1.ops, "leafline_completion_applied_total"); got != n {
		t.Fatalf("applied %v receipts for %d events: a receipt was applied twice", got, n)
	}
	t.Logf("duplicates absorbed at L1: %v", metric(t, l1.ops, "leafline_completion_duplicates_total"))
}
