package state

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the completion state folds the records, imports the KV layout, and needs the wire format.
func TestImports(t *testing.T) {
	importcheck.Only(t, "receipt", "completion/record", "completion/kvstore")
}
