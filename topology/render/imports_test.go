package render

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: rendering reads a topology and its links' permissions; it
// imports nothing else of this module, and topology does not import it.
func TestImports(t *testing.T) { importcheck.Only(t, "topology", "topology/linkperm") }
