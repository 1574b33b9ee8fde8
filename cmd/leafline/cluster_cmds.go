package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/render"
)

// renderCluster writes one stock nats-server configuration per node of
// cfg.Cluster.Nodes into dir, as <node>.conf, and names each file on stdout.
func renderCluster(t *topology.Topology, cfg *topology.Config, dir string, stdout, stderr io.Writer) int {
	if dir == "" {
		fmt.Fprintf(stderr, "leafline topology render: --out DIR is required: the config of site %q describes %d cluster nodes, one configuration file each\n", cfg.Site, len(cfg.Cluster.Nodes))
		return exitUsage
	}
	nodes, err := render.ClusterConfigs(t, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "leafline topology render: %v\n", err)
		return exitUsage
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "leafline topology render: --out: %v\n", err)
		return exitFailure
	}
	for _, n := range nodes {
		path := filepath.Join(dir, n.Name+".conf")
		if err := os.WriteFile(path, []byte(n.Config), 0o644); err != nil {
			fmt.Fprintf(stderr, "leafline topology render: %v\n", err)
			return exitFailure
		}
		fmt.Fprintln(stdout, path)
	}
	return exitOK
}
