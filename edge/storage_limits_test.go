package edge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/loopback"
	"github.com/leafline/leafline/topology"
)

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
	app, err := newBox(cfg, ctLogger(t))
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
