package outbox

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports holds the layering rule: outbox imports only the standard
// library, bbolt and bbolt's own dependency golang.org/x/sys (for Windows
// file locks); no other leafline package, nothing NATS.
func TestImports(t *testing.T) { importcheck.Only(t, "go.etcd.io/bbolt", "golang.org/x/sys/") }
