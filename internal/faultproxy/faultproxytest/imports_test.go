package faultproxytest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a test helper on the proxy alone.
func TestImports(t *testing.T) { importcheck.Only(t, "internal/faultproxy") }
