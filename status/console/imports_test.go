package console

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the console imports, of this module, only receipts (whose
// types it shows); nothing of edge, so that any L1 can serve it.
func TestImports(t *testing.T) { importcheck.Only(t, "receipt", "completion/record", "status") }
