package sinktest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the conformance suite runs a sink alone; the cases that
// need a whole system are package systest's.
func TestImports(t *testing.T) {
	importcheck.Only(t, "sink")
}
