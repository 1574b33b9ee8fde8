package sinktest

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the conformance suite runs sinks alone and in whole systems of edge boxes.
func TestImports(t *testing.T) {
	importcheck.Only(t, "edge", "edge/runner", "internal/check", "internal/demo", "internal/localsys", "internal/logx", "receipt", "sink", "topology")
}
