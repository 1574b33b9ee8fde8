package render

import (
	"errors"
	"fmt"

	"github.com/leafline/leafline/topology"
)

// NodeConfig is one cluster node's stock nats-server configuration.
type NodeConfig struct {
	// Name is the node's server name.
	Name string
	// Config is the configuration file's text.
	Config string
}

// ClusterConfigs returns one nats-server configuration per node of
// local.Cluster.Nodes, for the l1 or hub site of local: what ServerConfig
// writes for the site, with each node's server name, client listener and
// store, a cluster block with routes to every other node, and a leafnode
// listener on every node, so that a downstream site given all the nodes'
// addresses (leafnode.upstream_urls) moves to another node when the one it
// uses dies. A hub's remote to its upstream lists every URL of the box's
// leafnode.upstream_urls, so each node links to any node of an upstream
// cluster. The servers form one JetStream cluster in the site's domain;
// leafline's streams, buckets and consumers are created there by the box
// running in cluster mode, with cluster.replicas.
func ClusterConfigs(t *topology.Topology, local *topology.Config) ([]NodeConfig, error) {
	if local == nil || len(local.Cluster.Nodes) == 0 {
		return nil, errors.New("topology: the box config has no cluster.nodes to render")
	}
	s, ok := t.Site(local.Site)
	if !ok {
		return nil, fmt.Errorf("topology: unknown site %q", local.Site)
	}
	if s.Role == topology.RoleEdge {
		return nil, fmt.Errorf("topology: site %q is an edge; only l1 and hub sites run on a cluster", s.Name)
	}
	out := make([]NodeConfig, 0, len(local.Cluster.Nodes))
	for i := range local.Cluster.Nodes {
		n := &local.Cluster.Nodes[i]
		conf, err := server(t, s, local, n)
		if err != nil {
			return nil, err
		}
		out = append(out, NodeConfig{Name: n.Name, Config: conf})
	}
	return out, nil
}

// writeRoutes writes the cluster block of node: its route listener and a
// route to every other node.
func writeRoutes(w *confWriter, c topology.ClusterConfig, node *topology.ClusterNode) {
	var routes []string
	for _, n := range c.Nodes {
		if n.Name != node.Name {
			routes = append(routes, "nats-route://"+n.ClusterListen)
		}
	}
	w.blank()
	w.comment("One JetStream cluster of %d nodes; streams and buckets run with %d replicas.", len(c.Nodes), c.Replicas)
	w.open("cluster")
	w.kv("name", q(c.Name))
	w.kv("listen", q(node.ClusterListen))
	w.kv("routes", qlist(routes))
	w.close()
}
