package main

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the command is the top layer: it wires the packages and is imported by none.
func TestImports(t *testing.T) {
	importcheck.Only(t, "cleanup", "jsplan", "completion/record", "edge", "cmd/leafline/internal/bench", "internal/demo", "internal/progress", "outbox", "pki", "publish", "receipt", "status", "topology", "topology/render")
}
