package status

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the status API serves records from any source, over HTTP and NATS.
func TestImports(t *testing.T) {
	importcheck.Only(t, "receipt", "completion/record", "topology/subjects")
}
