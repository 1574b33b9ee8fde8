package edge

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the box wires the runner, sinks, outbox, receipts and PKI; it never imports a test or demo harness (internal/localsys, internal/demo) or a fault injector.
func TestImports(t *testing.T) {
	importcheck.Only(t, "internal/ctxsleep", "jsplan", "cleanup", "completion", "completion/record", "completion/state", "edge/eventid", "edge/runner", "internal/logx", "hop", "internal/dirsync", "outbox", "pki", "receipt", "sink", "status", "status/console", "topology")
}
