package sink_test

import (
	"testing"
	"time"

	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/topology"
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

func TestExecSink_Box(t *testing.T) {
	t.Parallel() // each runs a system of its own, mostly waiting out an outage
	x := newExecTarget(t)
	x.cfg = func(c *topology.ExecSinkConfig) { c.Timeout = topology.Duration(3 * time.Second) }
	sinktest.RunBox(t, x, sinktest.BoxOptions{})
}
