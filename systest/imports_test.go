package systest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a system of boxes sits above them all.
func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "box", "edge", "edge/runner", "internal/check", "internal/jstest", "internal/localsys", "internal/logx", "receipt", "sink", "sink/sinktest", "topology")
}
