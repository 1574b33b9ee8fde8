package record

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the records and the rules that change them build on the wire format alone.
func TestImports(t *testing.T) { importcheck.Only(t, "receipt") }
