package edge

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the edge role wires the runner, sinks, outbox and receipts
// on the box; it knows nothing of L1's completion service or the hub, and
// never imports a test or demo harness or a fault injector.
func TestImports(t *testing.T) {
	importcheck.Only(t, "box", "edge/runner", "internal/ctxsleep", "jsplan", "outbox", "receipt", "receipt/eventid", "sink", "topology")
}
