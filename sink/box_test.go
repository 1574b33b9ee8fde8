package sink_test

import (
	"testing"

	"github.com/leafline/leafline/systest"
)

// The box cases run every sink through a whole system (systest.RunSink);
// the targets are those of each sink's own conformance test. They run in
// parallel: most of each is the 30s outage.

func TestHTTPSink_Box(t *testing.T) {
	t.Parallel() // each runs a system of its own, mostly waiting out an outage
	systest.RunSink(t, startHTTPTarget(t, "batch"), systest.SinkOptions{})
}

func TestNATSSink_Box(t *testing.T) {
	t.Parallel() // each runs a system of its own, mostly waiting out an outage
	systest.RunSink(t, newNATSTarget(t), systest.SinkOptions{})
}
