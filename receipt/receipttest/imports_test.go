package receipttest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a test helper on the wire format.
func TestImports(t *testing.T) { importcheck.Only(t, "receipt") }
