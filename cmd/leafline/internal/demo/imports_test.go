package demo

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the demo sits above the boxes: it runs a whole system of them (package systest).
func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "box", "internal/ctxsleep", "internal/jsmsg", "internal/localsys", "internal/progress", "receipt", "sink", "status", "systest", "topology")
}
