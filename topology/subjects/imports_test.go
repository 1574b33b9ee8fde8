package subjects

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a helper: nothing of this module.
func TestImports(t *testing.T) { importcheck.Only(t) }
