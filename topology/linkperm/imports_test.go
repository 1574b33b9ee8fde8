package linkperm

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the links' permissions derive from the topology alone.
func TestImports(t *testing.T) { importcheck.Only(t, "topology/subjects", "topology") }
