package render_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/render"
)

// examplesDir holds the example configs, in configs/ at the module root.
const examplesDir = "../../configs"

func TestClusterConfigs(t *testing.T) {
	c, err := topology.LoadConfig(filepath.Join(examplesDir, "cluster", "hub.json"))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := render.ClusterConfigs(c.Topology, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("%d nodes rendered, want 3", len(nodes))
	}
	for i, n := range nodes {
		want := []string{
			`server_name: "hub-n` + string(rune('1'+i)) + `"`,
			`domain: "hub"`,
			`name: "hub"`,
			`listen: "127.0.0.2` + string(rune('1'+i)) + `:7422"`,
			`urls: ["nats-leaf://127.0.0.11:7422", "nats-leaf://127.0.0.12:7422", "nats-leaf://127.0.0.13:7422"]`,
		}
		for _, w := range want {
			if !strings.Contains(n.Config, w) {
				t.Errorf("node %s lacks %q:\n%s", n.Name, w, n.Config)
			}
		}
		if strings.Contains(n.Config, "nats-route://127.0.0.2"+string(rune('1'+i))) {
			t.Errorf("node %s routes to itself:\n%s", n.Name, n.Config)
		}
	}
	edge, _ := topology.LoadConfig(filepath.Join(examplesDir, "cluster", "edge1.json"))
	if _, err := render.ClusterConfigs(edge.Topology, edge); err == nil {
		t.Fatal("ClusterConfigs of an edge config without nodes: no error")
	}
}
