package pki

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: pki builds on the topology alone.
func TestImports(t *testing.T) { importcheck.Only(t, "topology") }
