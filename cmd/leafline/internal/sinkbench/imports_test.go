package sinkbench

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the sinks bench drains a system of boxes (package systest)
// through each sink.
func TestImports(t *testing.T) {
	importcheck.Only(t, "box", "edge", "internal/cputime", "internal/ctxsleep", "internal/jsmsg", "sink", "systest", "topology")
}
