package sink_test

import (
	"sync/atomic"

	"github.com/leafline/leafline/sink"
)

// crashCounts counts what a sink reports through sink.Counters.
type crashCounts struct{ crashes, restarts atomic.Int64 }

func (c *crashCounts) counters() sink.Counters {
	return sink.Counters{
		TargetCrash:   func() { c.crashes.Add(1) },
		WorkerRestart: func() { c.restarts.Add(1) },
	}
}
