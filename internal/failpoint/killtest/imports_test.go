package killtest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a test helper on the failpoints.
func TestImports(t *testing.T) { importcheck.Only(t, "internal/failpoint") }
