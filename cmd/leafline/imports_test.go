package main

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the command is the top layer: it wires the packages and is imported by none.
func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "box", "cleanup", "jsplan", "completion/record", "l1", "cmd/leafline/internal/bench", "cmd/leafline/internal/demo", "cmd/leafline/internal/sinkbench", "internal/memlimit", "internal/progress", "outbox", "pki", "publish", "receipt", "status", "topology", "topology/linkperm", "topology/render")
}
