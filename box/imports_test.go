package box

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the box knows no role (package edge, hub or l1): it calls
// the one it is given through Role.
func TestImports(t *testing.T) {
	importcheck.Only(t, "completion", "hop", "internal/ctxsleep", "internal/dirsync", "internal/jsmsg", "internal/logx", "internal/memlimit", "jsplan", "outbox", "pki", "topology", "topology/linkperm")
}
