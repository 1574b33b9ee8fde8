package topology

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the topology is the bottom layer; of this module it imports
// only its own strict JSON decoder, the subject rules and the receipt's
// wire format (its class lanes' subjects), and never what builds on it
// (topology/render).
func TestImports(t *testing.T) {
	importcheck.Only(t, "receipt", "topology/subjects", "topology/internal/strictjson", "topology/internal/syntax")
}
