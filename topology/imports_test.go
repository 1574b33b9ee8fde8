package topology

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the topology is the bottom layer; it imports nothing of this
// module.
func TestImports(t *testing.T) { importcheck.Only(t) }
