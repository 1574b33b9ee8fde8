package leafline

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: package leafline puts a role on a box, and nothing else.
func TestImports(t *testing.T) {
	importcheck.Only(t, "box", "completion", "edge", "hub", "l1", "outbox", "topology")
}
