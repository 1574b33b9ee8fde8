package topology

import (
	"path/filepath"
	"testing"
)

func clusterConfig(t *testing.T, site string) *Config {
	t.Helper()
	var c Config
	readJSON(t, filepath.Join(examplesDir, "cluster", site+".json"), &c)
	return &c
}

func TestClusterConfigs_Load(t *testing.T) {
	for _, site := range []string{"l1", "l1-b", "hub", "edge1", "edge2"} {
		t.Run(site, func(t *testing.T) {
			c, err := LoadConfig(filepath.Join(examplesDir, "cluster", site+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if s, _ := c.Topology.Site(c.Site); s.Role != RoleEdge {
				if !c.Cluster.Enabled() || c.Cluster.Replicas != 3 || len(c.Cluster.Nodes) != 3 {
					t.Fatalf("cluster = %+v, want 3 URLs, 3 replicas, 3 nodes", c.Cluster)
				}
			} else if len(c.UpstreamURLs(s)) != 3 {
				t.Fatalf("upstream URLs = %v, want the 3 hub nodes", c.UpstreamURLs(s))
			}
		})
	}
}

func TestClusterConfig_Validate_Bad(t *testing.T) {
	tests := []struct {
		name   string
		site   string
		mutate func(*Config)
		path   string
		msg    string
	}{
		{"url scheme", "l1", func(c *Config) { c.Cluster.URLs[1] = "http://127.0.0.12:4222" }, "cluster.urls[1]", `scheme "http" is not one of nats, tls`},
		{"url password", "l1", func(c *Config) { c.Cluster.URLs[0] = "nats://u:secret@127.0.0.11:4222" }, "cluster.urls[0]", "carries a password"},
		{"url no port", "hub", func(c *Config) { c.Cluster.URLs[2] = "nats://127.0.0.23" }, "cluster.urls[2]", "no port"},
		{"replicas", "l1", func(c *Config) { c.Cluster.Replicas = 7 }, "cluster.replicas", "7 is outside 1..5"},
		{"settings without urls", "l1", func(c *Config) { c.Cluster = ClusterConfig{CredentialsFile: "x.creds"} }, "cluster.urls", "required when any other cluster setting is given"},
		{"domain", "l1", func(c *Config) { c.Cluster.JetStreamDomain = "origin" }, "cluster.jetstream_domain", `"origin" is not site "l1"'s domain "l1"`},
		{"edge on cluster", "edge1", func(c *Config) { c.Cluster.URLs = []string{"nats://127.0.0.1:4222"} }, "cluster", "only an l1 or hub site runs on an existing cluster"},
		{"too few nodes", "hub", func(c *Config) { c.Cluster.Nodes = c.Cluster.Nodes[:2] }, "cluster.nodes", "2 nodes cannot hold 3 replicas"},
		{"duplicate node", "hub", func(c *Config) { c.Cluster.Nodes[1].Name = "hub-n1" }, "cluster.nodes[1].name", `duplicate node name "hub-n1"`},
		{"node address reused", "hub", func(c *Config) { c.Cluster.Nodes[2].ClusterListen = "127.0.0.21:6222" }, "cluster.nodes[2].cluster_listen", "is also cluster.nodes[0].cluster_listen"},
		{"node without leafnode", "hub", func(c *Config) { c.Cluster.Nodes[0].LeafnodeListen = "" }, "cluster.nodes[0].leafnode_listen", "downstream sites"},
		{"node without data dir", "l1", func(c *Config) { c.Cluster.Nodes[2].DataDir = "" }, "cluster.nodes[2].data_dir", "required"},
		{"upstream urls and url", "edge1", func(c *Config) { c.Leafnode.UpstreamURL = "nats-leaf://127.0.0.21:7422" }, "leafnode.upstream_urls", "not both"},
		{"upstream urls scheme", "edge1", func(c *Config) { c.Leafnode.UpstreamURLs[1] = "https://127.0.0.22:7422" }, "leafnode.upstream_urls[1]", `scheme "https"`},
		{"upstream urls duplicate", "edge2", func(c *Config) { c.Leafnode.UpstreamURLs[2] = c.Leafnode.UpstreamURLs[0] }, "leafnode.upstream_urls[2]", "duplicate URL"},
		{"upstream urls on l1", "l1", func(c *Config) { c.Leafnode.UpstreamURLs = []string{"nats-leaf://127.0.0.9:7422"} }, "leafnode.upstream_urls", "no upstream to dial"},
	}
	var topo Topology
	readJSON(t, filepath.Join(examplesDir, "cluster", "topology.json"), &topo)
	tb := mustMarshal(t, &topo)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterConfig(t, tt.site)
			tt.mutate(c)
			path := writeBox(t, tb, mustMarshal(t, c))
			_, err := LoadConfig(path)
			wantProblem(t, err, path, tt.path, tt.msg)
		})
	}
}

func TestParseConfig_ClusterStrict(t *testing.T) {
	var topo Topology
	readJSON(t, filepath.Join(examplesDir, "cluster", "topology.json"), &topo)
	box := `{"topology": "topology.json", "site": "l1", "data_dir": "/tmp/x",
	  "cluster": {"urls": ["nats://127.0.0.11:4222"], "replica": 3, "nodes": [{"name": "n1", "listen": 5}]}}`
	path := writeBox(t, mustMarshal(t, &topo), []byte(box))
	_, err := LoadConfig(path)
	wantProblem(t, err, path, "cluster.replica", "unknown")
	wantProblem(t, err, path, "cluster.nodes[0].listen", "")
}
