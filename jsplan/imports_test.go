package jsplan

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

func TestImports(t *testing.T) {
	importcheck.Only(t, "receipt", "topology/subjects", "topology", "topology/linkperm")
}
