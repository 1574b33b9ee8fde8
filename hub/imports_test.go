package hub

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the hub role is the box and the link beats.
func TestImports(t *testing.T) {
	importcheck.Only(t, "box", "status/console")
}
