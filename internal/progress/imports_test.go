package progress

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: progress is a leaf that imports only the standard library,
// so that any command or package may use it.
func TestImports(t *testing.T) { importcheck.Only(t, importcheck.StdlibOnly) }
