package syntax

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: eventid imports nothing of ours, so that L1 and the edge's
// runner both import it without importing each other.
func TestImports(t *testing.T) { importcheck.Only(t) }
