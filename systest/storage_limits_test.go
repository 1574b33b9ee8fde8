package systest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/topology"
)

// limitsConfig is the config of site (l1, hub or edge1) in a System laid
// out on loopback, on dataDir, with the given jetstream limits (0: the
// default).
func limitsConfig(t *testing.T, site, dataDir string, maxStore, maxStream int64) *topology.Config {
	t.Helper()
	ls, err := newLocal(t.TempDir(), Options{Insecure: true, UnsignedReceipts: true, Configure: func(c *topology.Config) {
		if c.Site == site {
			c.DataDir = dataDir
			c.JetStream.MaxStoreBytes, c.JetStream.MaxStreamBytes = maxStore, maxStream
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	return ls.Configs[site]
}

// runToReady runs a box of cfg: it returns Run's error when the start
// fails, or nil once the box was ready and then stopped cleanly.
func runToReady(t *testing.T, cfg *topology.Config) error {
	t.Helper()
	app, err := leafline.New(cfg, testLogger(t))
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
