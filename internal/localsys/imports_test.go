package localsys

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the harness is generic over the box, so that the box package's own tests can use it: it never imports edge.
func TestImports(t *testing.T) {
	importcheck.Only(t, "internal/faultproxy", "internal/loopback", "pki", "topology")
}
