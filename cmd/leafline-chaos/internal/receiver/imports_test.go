package receiver

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the receiver is an http target speaking the sink's
// protocol; it imports the sink for that protocol and nothing of the
// boxes.
func TestImports(t *testing.T) { importcheck.Only(t, "internal/ctxsleep", "sink") }
