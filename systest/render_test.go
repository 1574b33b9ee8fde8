package systest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/logx"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology/render"
)

// TestRender_StockHub runs the hub as a stock nats-server started from the
// configuration `leafline topology render` produces (mutual TLS, an nkey
// per site, per-link permissions), between a leafline L1 and a leafline
// edge: the links come up and every event completes.
func TestRender_StockHub(t *testing.T) {
	ls, err := newLocal(t.TempDir(), Options{Logger: testLogger(t), Configure: stockSite("hub")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	hubCfg := ls.Configs["hub"]
	conf, err := render.ServerConfig(ls.Topology, "hub", hubCfg)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := os.ReadFile(ls.Credentials.Sites["hub"].NkeySeedFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(conf, strings.TrimSpace(string(seed))) {
		t.Fatal("the rendered configuration holds the hub's seed")
	}
	t.Setenv(render.SeedEnv("hub"), strings.TrimSpace(string(seed)))
	path := filepath.Join(t.TempDir(), "hub.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ls.Start(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("stock nats-server cannot load the rendered config: %v\n%s", err, conf)
	}
	hub := jstest.Run(t, opts)

	if err := jsplan.Provision(ctx, jstest.ConnectURL(t, hub.ClientURL()), hubCfg); err != nil {
		t.Fatalf("provision the stock hub: %v", err)
	}
	edge, err := ls.Start(ctx, "edge1")
	if err != nil {
		t.Fatal(err)
	}
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if !box.UpstreamConnected(hub) {
			return errors.New("stock hub not connected to l1")
		}
		if !edge.UpstreamConnected() {
			return errors.New("edge1 not connected to the stock hub: " + box.UpstreamError(edge.Server()))
		}
		return nil
	})
	ids := publishN(t, jstest.ConnectURL(t, ls.App("l1").ClientURL()), "stock-hub", 200)
	waitCompleted(t, ls, ids, "edge1")
}

// testLogger discards logs unless the test is verbose.
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(logx.TestWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
