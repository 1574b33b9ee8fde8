package completion

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the completion state builds on the receipt's wire format
// and its fold rules, and on nothing else of this module.
func TestImports(t *testing.T) { importcheck.Only(t, "receipts") }
