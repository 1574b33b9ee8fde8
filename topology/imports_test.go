package topology

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the topology is the bottom layer; of this module it imports
// only its own strict JSON decoder and the subject rules, and never what
// builds on it
// (topology/render).
func TestImports(t *testing.T) {
	importcheck.Only(t, "topology/subjects", "topology/internal/strictjson", "topology/internal/syntax")
}
