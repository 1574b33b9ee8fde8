package jstest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a leaf of the test helpers: nothing of this module but
// the loopback ports.
func TestImports(t *testing.T) { importcheck.Only(t, "internal/loopback") }
