package box

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafline/leafline/topology"
)

// TestServerOptions_UpstreamURLs: an edge that lists every node of its
// hub's cluster gets one leafnode remote with all of them, so that the
// link moves to another node when the one it uses dies; the remote still
// never follows servers discovered through a node.
func TestServerOptions_UpstreamURLs(t *testing.T) {
	cfg, err := topology.LoadConfig(filepath.Join("..", "configs", "cluster", "edge1.json"))
	if err != nil {
		t.Fatal(err)
	}
	site, _ := cfg.Topology.Site(cfg.Site)
	opts, err := ServerOptions(cfg, site)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.LeafNode.Remotes) != 1 {
		t.Fatalf("%d leafnode remotes, want 1", len(opts.LeafNode.Remotes))
	}
	r := opts.LeafNode.Remotes[0]
	var got []string
	for _, u := range r.URLs {
		got = append(got, u.String())
	}
	want := cfg.Leafnode.UpstreamURLs
	if len(got) != len(want) || len(want) != 3 {
		t.Fatalf("remote URLs %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("remote URLs %v, want %v", got, want)
		}
	}
	if !r.IgnoreDiscoveredServers {
		t.Fatal("the remote follows discovered servers")
	}
}

// TestClusterPlan_Replicas: on a cluster every stream the box creates has
// cluster.replicas; the embedded server's has one.
func TestClusterPlan_Replicas(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   int
	}{
		{filepath.Join("..", "configs", "cluster", "l1.json"), 3},
		{filepath.Join("..", "configs", "cluster", "hub.json"), 3},
		{filepath.Join("..", "configs", "l1.json"), 1},
	} {
		cfg, err := topology.LoadConfig(tc.config)
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(cfg, nil, BaseRole{})
		if err != nil {
			t.Fatal(err)
		}
		p := a.clusterPlan()
		if len(p.Streams) == 0 {
			t.Fatalf("%s: no streams", tc.config)
		}
		for _, s := range p.Streams {
			if s.Replicas != tc.want {
				t.Errorf("%s: stream %s has %d replicas, want %d", tc.config, s.Name, s.Replicas, tc.want)
			}
		}
		if a.replicas() != tc.want {
			t.Errorf("%s: completion replicas %d, want %d", tc.config, a.replicas(), tc.want)
		}
	}
}

// TestCluster_WrongDomain: a box pointed at servers of another JetStream
// domain than its site's refuses to start, naming both domains, and
// creates nothing there.
func TestCluster_WrongDomain(t *testing.T) {
	srv, err := startServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		JetStreamDomain: "elsewhere", StoreDir: t.TempDir(), NoSigs: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	cfg, err := topology.LoadConfig(filepath.Join("..", "configs", "cluster", "l1.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cluster.URLs = []string{srv.ClientURL()}
	cfg.DataDir, cfg.Ops.Listen = t.TempDir(), "127.0.0.1:0"
	a, err := New(cfg, slog.New(slog.DiscardHandler), BaseRole{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), `domain is "elsewhere", site "l1"'s domain in the topology is "l1"`) {
		t.Fatalf("Run: %v; want the domain mismatch", err)
	}
	if jsz, err := srv.Jsz(nil); err != nil || jsz.Streams != 0 {
		t.Fatalf("streams on the wrong domain: %+v, %v", jsz, err)
	}
}
