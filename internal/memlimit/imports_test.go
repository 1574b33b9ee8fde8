package memlimit

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the memory limit reads a box's config and its role's
// default, and nothing else of this module.
func TestImports(t *testing.T) { importcheck.Only(t, "topology") }
