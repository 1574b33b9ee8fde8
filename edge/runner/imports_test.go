package runner

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the runner builds on the outbox, receipts, sinks and topology; it never imports the box that wires it, nor a harness.
func TestImports(t *testing.T) {
	importcheck.Only(t, "internal/ctxsleep", "receipt/eventid", "internal/failpoint", "outbox", "receipt", "sink", "topology")
}
