package kvstore

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the KV layout of the records: the records, and the wire format.
func TestImports(t *testing.T) { importcheck.Only(t, "receipt", "completion/record") }
