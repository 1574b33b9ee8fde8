package hop

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: relay imports the standard library and the NATS client
// libraries only; no other leafline package.
func TestImports(t *testing.T) {
	importcheck.Only(t, "internal/ctxsleep", "internal/jsmsg", "github.com/nats-io/nats.go", "github.com/synadia-io/orbit.go/jetstreamext")
}
