package sink

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the sinks know their config and the failpoints of fault
// runs, and nothing of the box that runs them.
func TestImports(t *testing.T) { importcheck.Only(t, "internal/failpoint", "topology") }
