package edge

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/loopback"
	"github.com/leafline/leafline/topology"
)

// The figures of each role's streams, and the advice when no value of
// max_stream_bytes fits.
func TestStorageFit_Explain(t *testing.T) {
	for _, c := range []struct {
		site  string
		limit int64
		wants []string
	}{
		{"hub", 100 << 20, []string{"reserve 2 GiB up front (HA and RH: jetstream.max_stream_bytes = 1 GiB each)",
			"lower jetstream.max_stream_bytes to at most 52428800 (50 MiB)"}},
		{"edge1", 90 << 20, []string{"reserve 2 GiB up front (L2A and RE: jetstream.max_stream_bytes = 1 GiB each)",
			"at most 47185920 (45 MiB)"}},
		// L1's quarantine stream has a fixed limit: it is left out of the
		// value for the others, and when it alone does not fit only disk
		// space helps.
		{"l1", (1 << 30) + 40<<20, []string{"(L1A and R1: jetstream.max_stream_bytes = 1 GiB each; RQ: 1 GiB, fixed)",
			"reserve 3 GiB", "at most 20971520 (20 MiB)"}},
		{"l1", 100 << 20, []string{"give the data dir a filesystem with at least 4 GiB free"}},
	} {
		cfg := limitsConfig(t, c.site, t.TempDir(), 0, 0)
		site, _ := cfg.Topology.Site(c.site)
		f := storageFit{streams: storageReserves(cfg, site), dir: "/data", free: uint64(c.limit / 3 * 4), limit: c.limit}
		got := f.explain()
		for _, w := range c.wants {
			if !strings.Contains(got, w) {
				t.Errorf("%s, limit %d: does not say %q:\n%s", c.site, c.limit, w, got)
			}
		}
	}
}

// limitsConfig is a validated config of site (l1, hub or edge1) with the
// given jetstream limits (0: the default), on free loopback ports.
func limitsConfig(t *testing.T, site, dataDir string, maxStore, maxStream int64) *topology.Config {
	t.Helper()
	ports, err := loopback.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	return siteConfig(t, site, dataDir, [2]int{ports[0], ports[1]}, func(cfg *topology.Config) {
		cfg.JetStream.MaxStoreBytes = maxStore
		cfg.JetStream.MaxStreamBytes = maxStream
	})
}

// runToReady runs a box of cfg: it returns Run's error when the start
// fails, or nil once the box was ready and then stopped cleanly.
func runToReady(t *testing.T, cfg *topology.Config) error {
	t.Helper()
	app, err := New(cfg, ctLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			return errors.New("Run returned nil before the box was ready")
		}
		return err
	case <-app.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the box was neither ready nor failed after 30s")
	}
	cancel()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the box did not stop within 30s")
		return nil
	}
}
