package importcheck

import "testing"

// TestImports: importcheck holds itself to its own rule; it is a leaf that
// imports nothing of this module.
func TestImports(t *testing.T) { Only(t) }
