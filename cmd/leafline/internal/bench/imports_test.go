package bench

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the benchmark sits above everything it measures; nothing but cmd imports it.
func TestImports(t *testing.T) {
	importcheck.Only(t, ".", "box", "cmd/leafline/internal/bench/meter", "completion", "completion/record", "completion/state", "edge", "edge/runner", "internal/ctxsleep", "internal/jsmsg", "internal/loopback", "outbox", "publish", "receipt", "sink", "status", "systest", "topology")
}
