package strictjson

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the decoder is a leaf: the standard library only.
func TestImports(t *testing.T) { importcheck.Only(t, importcheck.StdlibOnly) }
