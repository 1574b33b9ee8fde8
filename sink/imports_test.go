package sink

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the sinks know their config, the failpoints of fault runs
// and how to make a directory's names durable (internal/dirsync), and
// nothing of the box that runs them.
func TestImports(t *testing.T) {
	importcheck.Only(t, "internal/dirsync", "internal/failpoint", "topology")
}
