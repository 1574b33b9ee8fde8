package edge

import (
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/sink"
)

// runner is the part of m that the sink runner counts into.
func (m *Metrics) runner() runner.Metrics {
	return runner.Metrics{
		Fetched: m.fetched, Processed: m.processed, Acked: m.acked, Nacked: m.nacked,
		Terminated: m.terminated, DeadLettered: m.deadLettered, Expired: m.expired,
		PermanentUnacked: m.permanentUnacked, Redeliveries: m.redeliveries,
		MaxDeliverExhausted: m.maxDeliverExhausted,
		ReceiptsPublished:   m.receiptsPublished, ReceiptPublishErrors: m.receiptPublishErrors,
		DLQPublishErrors: m.dlqPublishErrors, EventIDReused: m.eventIDReused, PoisonEvents: m.poisonEvents,
		AckConfAttempts: m.ackConfAttempts, AckConfSuccesses: m.ackConfSuccesses,
		AckConfTimeouts: m.ackConfTimeouts, AckConfFailures: m.ackConfFailures,
		SinkSeconds: m.sinkSeconds, PubAckSeconds: m.pubAckSeconds, AckConfSeconds: m.ackConfSeconds,
	}
}

// sink is the part of m that a configured sink counts into.
func (m *Metrics) sink() sink.Counters {
	return sink.Counters{TargetCrash: m.sinkTargetCrashes.Inc, WorkerRestart: m.sinkWorkerRestarts.Inc}
}
