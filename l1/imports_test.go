package l1

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the l1 role wires L1's concerns on the box; it knows
// nothing of the edge's runner, sinks or outbox.
func TestImports(t *testing.T) {
	importcheck.Only(t, "box", "cleanup", "completion", "completion/record", "completion/state", "jsplan", "receipt", "receipt/eventid", "status", "status/console", "topology")
}
