package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/leafline/leafline/internal/loopback"
)

func freePort(t *testing.T) int {
	t.Helper()
	ports, err := loopback.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyTopology writes the repository's configs/topology.json into dir.
func copyTopology(t *testing.T, dir string) {
	t.Helper()
	topo, err := os.ReadFile("../../configs/topology.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "topology.json"), topo, 0o644); err != nil {
		t.Fatal(err)
	}
}
