package natsproc

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: natsproc imports only the standard library; it runs the
// server as a process, never links it.
func TestImports(t *testing.T) { importcheck.Only(t, importcheck.StdlibOnly) }
