package box

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leafline/leafline/topology"
)

func TestMemoryVerdict(t *testing.T) {
	for _, tc := range []struct {
		live, held, limit int64
		short             bool
	}{
		{live: 500 << 20, held: 900 << 20, limit: 0},                      // no limit: never short
		{live: 100 << 20, held: 180 << 20, limit: 192 << 20},              // room to collect
		{live: 174 << 20, held: 190 << 20, limit: 192 << 20, short: true}, // live past 90%
		{live: 100 << 20, held: 210 << 20, limit: 192 << 20, short: true}, // held past the limit
		{live: 100 << 20, held: 200 << 20, limit: 192 << 20},              // a collection's overshoot
		{live: 172 << 20, held: 192 << 20, limit: 192 << 20},              // at the edges, inside
	} {
		v := memoryVerdict(tc.live, tc.held, tc.limit)
		if (v != "") != tc.short {
			t.Errorf("live %d held %d limit %d: verdict %q, want short=%t", tc.live>>20, tc.held>>20, tc.limit>>20, v, tc.short)
		}
		if v != "" && !strings.Contains(v, "memory_limit_bytes") {
			t.Errorf("verdict %q does not name the setting to raise", v)
		}
	}
}

// TestMemory_ShortSaysSo: a box whose live heap does not fit its limit
// says so in its log, /readyz and leafline_memory_pressure, and says so no
// more once it fits again.
func TestMemory_ShortSaysSo(t *testing.T) {
	cfg, err := topology.LoadConfig(filepath.Join("..", "configs", "l1.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.Ops.Listen = t.TempDir(), "127.0.0.1:0"
	var logs bytes.Buffer
	a, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)), BaseRole{})
	if err != nil {
		t.Fatal(err)
	}
	a.isReady.Store(true)
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })

	debug.SetMemoryLimit(1 << 40)
	a.checkMemory()
	if r := a.readiness(); !r.Ready {
		t.Fatalf("ready under a large limit: %+v", r)
	}
	ballast := make([]byte, 96<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
	runtime.GC()
	debug.SetMemoryLimit(64 << 20)
	a.checkMemory()
	debug.SetMemoryLimit(1 << 40)
	r := a.readiness()
	if r.Ready || !strings.HasPrefix(r.Reason, "memory: the live heap is") {
		t.Fatalf("readiness with 96 MiB live under a 64 MiB limit: %+v", r)
	}
	if got := testutil.ToFloat64(a.metrics.memoryPressure); got != 1 {
		t.Fatalf("leafline_memory_pressure = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"memory: the live heap is") {
		t.Fatalf("no WARN in the log:\n%s", logs.String())
	}
	runtime.KeepAlive(ballast)

	a.checkMemory()
	if r := a.readiness(); !r.Ready || testutil.ToFloat64(a.metrics.memoryPressure) != 0 {
		t.Fatalf("back under a large limit: %+v", r)
	}
	if !strings.Contains(logs.String(), "memory: back inside the limit") {
		t.Fatalf("no note that the box is back inside its limit:\n%s", logs.String())
	}
}
