package syntax

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: syntax imports nothing of ours; topology builds on it.
func TestImports(t *testing.T) { importcheck.Only(t) }
