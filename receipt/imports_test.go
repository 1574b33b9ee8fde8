package receipt

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the wire format, all an edge needs of receipts: nothing of this module.
func TestImports(t *testing.T) { importcheck.Only(t) }
