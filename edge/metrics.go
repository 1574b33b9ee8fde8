package edge

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/sink"
)

// metrics are the edge role's metrics in its box's registry: the sink
// runner's, the sink's and the outbox's.
type metrics struct {
	fetched, processed, acked, nacked, terminated, deadLettered prometheus.Counter
	permanentUnacked, redeliveries, maxDeliverExhausted         prometheus.Counter
	receiptsPublished, receiptPublishErrors                     prometheus.Counter
	relayPublished, relayErrors                                 prometheus.Counter
	dlqPublishErrors                                            prometheus.Counter
	eventIDReused                                               prometheus.Counter
	expired                                                     prometheus.Counter
	poisonEvents, sinkTargetCrashes, sinkWorkerRestarts         prometheus.Counter
	sinkSeconds, pubAckSeconds                                  prometheus.Histogram

	ackConfAttempts, ackConfSuccesses, ackConfTimeouts prometheus.Counter
	ackConfFailures, ackConfUnsupported                prometheus.Counter
	ackConfSeconds                                     prometheus.Histogram

	outboxPending prometheus.Gauge
	eventsWaiting *prometheus.GaugeVec
}

func newMetrics(b *box.Metrics) *metrics {
	m := &metrics{}
	m.fetched = b.Counter("messages_fetched_total", "Messages fetched from the edge events stream.")
	m.processed = b.Counter("messages_processed_total", "Messages durably processed and receipted.")
	m.acked = b.Counter("messages_acked_total", "Messages ACKed after their durable commit and receipt PubAck.")
	m.nacked = b.Counter("messages_nacked_total", "Messages NAKed after a temporary failure.")
	m.terminated = b.Counter("messages_terminated_total", "Messages terminated (AckTerm) after their DLQ record was PubAck'ed.")
	m.deadLettered = b.Counter("messages_dead_lettered_total", "Messages whose DLQ record was PubAck'ed.")
	m.expired = b.Counter("messages_expired_total", "Messages not processed because they were older than their expiry, ACKed after their expired receipt's PubAck.")
	m.maxDeliverExhausted = b.Counter("max_deliver_exhausted_total", "Temporary failures on the last delivery the consumer allows.")
	m.permanentUnacked = b.Counter("messages_permanent_unacked_total", "Permanent failures left unacked because no DLQ is configured.")
	m.redeliveries = b.Counter("redeliveries_total", "Messages fetched with a delivery count above one.")
	m.receiptsPublished = b.Counter("receipts_published_total", "Receipts PubAck'ed by the local receipts stream (runner).")
	m.receiptPublishErrors = b.Counter("receipt_publish_errors_total", "Receipt batches that were not PubAck'ed (runner).")
	m.relayPublished = b.Counter("relay_published_total", "Pending receipts republished by the outbox relay.")
	m.relayErrors = b.Counter("relay_errors_total", "Outbox relay publish attempts that failed.")
	m.dlqPublishErrors = b.Counter("dlq_publish_errors_total", "DLQ records that were not PubAck'ed.")
	m.eventIDReused = b.Counter("event_id_reused_total", "Messages whose event_id was receipted before for another payload (the first outcome stands; logged at WARN).")
	m.poisonEvents = b.Counter("poison_events_total", "Events dead-lettered as worker_crash: in flight at sink.exec.poison_after (or sink.http.poison_after) crashes of the sink's target in a row.")
	m.sinkTargetCrashes = b.Counter("sink_target_crashes_total", "Crashes of the sink's target: an exec worker that exited by itself, an http target that reset or closed a request's connection before its answer.")
	m.sinkWorkerRestarts = b.Counter("sink_worker_restarts_total", "Exec sink workers started again after one ended.")
	m.sinkSeconds = b.Histogram("sink_write_seconds", "Time to write one batch through the sink.")
	m.pubAckSeconds = b.Histogram("receipt_puback_seconds", "Time from a receipt batch publish to its last PubAck.")
	m.ackConfAttempts = b.Counter("ack_confirmation_attempts_total", "Messages for which confirmed ACK was attempted.")
	m.ackConfSuccesses = b.Counter("ack_confirmation_successes_total", "Confirmed ACK attempts accepted by the server.")
	m.ackConfTimeouts = b.Counter("ack_confirmation_timeouts_total", "Confirmed ACK attempts that timed out.")
	m.ackConfFailures = b.Counter("ack_confirmation_failures_total", "Confirmed ACK attempts that failed for another reason.")
	m.ackConfUnsupported = b.Counter("ack_confirmation_unsupported_total", "Messages where confirmation was requested but unsupported.")
	m.ackConfSeconds = b.Histogram("ack_confirmation_seconds", "Time spent waiting for ACK confirmation.")
	m.outboxPending = b.Gauge("outbox_pending", "Receipts committed to the outbox and not yet PubAck'ed.")
	m.eventsWaiting = b.GaugeVec("events_waiting", "Events in the edge's stream of each priority class (normal: its events stream) that the runner has not ACKed yet.", "class")
	return m
}

// runner is the part of m that the sink runner counts into.
func (m *metrics) runner() runner.Metrics {
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
func (m *metrics) sink() sink.Counters {
	return sink.Counters{TargetCrash: m.sinkTargetCrashes.Inc, WorkerRestart: m.sinkWorkerRestarts.Inc}
}
