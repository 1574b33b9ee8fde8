package sink_test

import (
	"testing"

	"github.com/leafline/leafline/sink/sinktest"
)

// The box cases run every sink through a whole system (sinktest.RunBox);
// the targets are those of each sink's own conformance test. They run in
// parallel: most of each is the 30s outage.

func TestHTTPSink_Box(t *testing.T) {
	t.Parallel() // each runs a system of its own, mostly waiting out an outage
	sinktest.RunBox(t, startHTTPTarget(t, "batch"), sinktest.BoxOptions{})
}

func TestNATSSink_Box(t *testing.T) {
	t.Parallel() // each runs a system of its own, mostly waiting out an outage
	sinktest.RunBox(t, newNATSTarget(t), sinktest.BoxOptions{})
}
