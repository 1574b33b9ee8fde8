package publish

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: publish imports no other leafline package, only the
// standard library and the NATS clients.
func TestImports(t *testing.T) {
	importcheck.Only(t, "github.com/nats-io/nats.go", "github.com/synadia-io/orbit.go/", "internal/ctxsleep", "internal/jsmsg")
}
