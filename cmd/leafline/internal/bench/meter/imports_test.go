package meter

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the meter draws on a writer and imports nothing of ours.
func TestImports(t *testing.T) { importcheck.Only(t) }
