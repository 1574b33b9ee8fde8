package completiontest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a test helper on L1's completion service.
func TestImports(t *testing.T) {
	importcheck.Only(t, "receipt", "completion", "completion/record", "internal/check", "internal/jstest", "receipt/receipttest")
}
