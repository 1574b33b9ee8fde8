package smalldisk

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a leaf: it imports nothing of this module, so that any package's tests may use it.
func TestImports(t *testing.T) { importcheck.Only(t) }
