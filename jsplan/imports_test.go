package jsplan

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

func TestImports(t *testing.T) {
	importcheck.Only(t, "topology/subjects", "topology", "topology/linkperm")
}
