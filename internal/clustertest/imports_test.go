package clustertest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the cluster system test drives real processes; its product code imports nothing of this module.
func TestImports(t *testing.T) { importcheck.Only(t) }
