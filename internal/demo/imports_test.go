package demo

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the demo sits above the box: it runs edge boxes through the local-system harness.
func TestImports(t *testing.T) {
	importcheck.Only(t, "internal/ctxsleep", "edge", "internal/localsys", "internal/progress", "receipt", "sink", "status", "topology")
}
