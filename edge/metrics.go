package edge

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
)

// Metrics are one box's Prometheus metrics, in their own registry (several
// boxes may run in one process, as in the demo). Labels are low-cardinality:
// never an event_id.
type Metrics struct {
	reg *prometheus.Registry
	f   factory

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

	upstreamConnected prometheus.Gauge
	outboxPending     prometheus.Gauge
	sourceLag         *prometheus.GaugeVec
	sourceActive      *prometheus.GaugeVec
	trimmed           *prometheus.CounterVec
	natsErrors        *prometheus.CounterVec

	storageFull, storageFree, jetstreamEnabled prometheus.Gauge
	storageWritable                            prometheus.Gauge

	completionStats atomic.Pointer[func() record.Stats]
	completionOnce  sync.Once
	state           atomic.Pointer[state.State]
	stateOnce       sync.Once

	unidentified     atomic.Pointer[func(context.Context) (int64, error)]
	unidentifiedOnce sync.Once

	sec   securityMetrics // see metrics_security.go
	held  heldMetrics     // see metrics_held.go
	links linkMetrics     // see metrics_links.go

	cleanup cleanupMetrics // see role_l1_cleanup.go
}

func newMetrics(site, role string) *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{reg: reg, labels: prometheus.Labels{"site": site, "role": role}}
	m := &Metrics{reg: reg, f: f}
	m.links.bytes = newLinkBytes()
	m.fetched = f.counter("messages_fetched_total", "Messages fetched from the edge events stream.")
	m.processed = f.counter("messages_processed_total", "Messages durably processed and receipted.")
	m.acked = f.counter("messages_acked_total", "Messages ACKed after their durable commit and receipt PubAck.")
	m.nacked = f.counter("messages_nacked_total", "Messages NAKed after a temporary failure.")
	m.terminated = f.counter("messages_terminated_total", "Messages terminated (AckTerm) after their DLQ record was PubAck'ed.")
	m.deadLettered = f.counter("messages_dead_lettered_total", "Messages whose DLQ record was PubAck'ed.")
	m.expired = f.counter("messages_expired_total", "Messages not processed because they were older than their expiry, ACKed after their expired receipt's PubAck.")
	m.maxDeliverExhausted = f.counter("max_deliver_exhausted_total", "Temporary failures on the last delivery the consumer allows.")
	m.permanentUnacked = f.counter("messages_permanent_unacked_total", "Permanent failures left unacked because no DLQ is configured.")
	m.redeliveries = f.counter("redeliveries_total", "Messages fetched with a delivery count above one.")
	m.receiptsPublished = f.counter("receipts_published_total", "Receipts PubAck'ed by the local receipts stream (runner).")
	m.receiptPublishErrors = f.counter("receipt_publish_errors_total", "Receipt batches that were not PubAck'ed (runner).")
	m.relayPublished = f.counter("relay_published_total", "Pending receipts republished by the outbox relay.")
	m.relayErrors = f.counter("relay_errors_total", "Outbox relay publish attempts that failed.")
	m.dlqPublishErrors = f.counter("dlq_publish_errors_total", "DLQ records that were not PubAck'ed.")
	m.eventIDReused = f.counter("event_id_reused_total", "Messages whose event_id was receipted before for another payload (the first outcome stands; logged at WARN).")
	m.poisonEvents = f.counter("poison_events_total", "Events dead-lettered as worker_crash: in flight at sink.exec.poison_after (or sink.http.poison_after) crashes of the sink's target in a row.")
	m.sinkTargetCrashes = f.counter("sink_target_crashes_total", "Crashes of the sink's target: an exec worker that exited by itself, an http target that reset or closed a request's connection before its answer.")
	m.sinkWorkerRestarts = f.counter("sink_worker_restarts_total", "Exec sink workers started again after one ended.")
	m.sinkSeconds = f.histogram("sink_write_seconds", "Time to write one batch through the sink.")
	m.pubAckSeconds = f.histogram("receipt_puback_seconds", "Time from a receipt batch publish to its last PubAck.")
	m.ackConfAttempts = f.counter("ack_confirmation_attempts_total", "Messages for which confirmed ACK was attempted.")
	m.ackConfSuccesses = f.counter("ack_confirmation_successes_total", "Confirmed ACK attempts accepted by the server.")
	m.ackConfTimeouts = f.counter("ack_confirmation_timeouts_total", "Confirmed ACK attempts that timed out.")
	m.ackConfFailures = f.counter("ack_confirmation_failures_total", "Confirmed ACK attempts that failed for another reason.")
	m.ackConfUnsupported = f.counter("ack_confirmation_unsupported_total", "Messages where confirmation was requested but unsupported.")
	m.ackConfSeconds = f.histogram("ack_confirmation_seconds", "Time spent waiting for ACK confirmation.")
	m.upstreamConnected = f.gauge("upstream_connected", "1 when the upstream leafnode link is connected.")
	m.outboxPending = f.gauge("outbox_pending", "Receipts committed to the outbox and not yet PubAck'ed.")
	m.sourceLag = f.gaugeVec("source_lag", "Messages the sourced stream is behind its source.", "stream", "source")
	m.trimmed = f.counterVec("stream_trimmed_messages_total", "Messages deleted from a stream after every consumer that takes them had them.", "stream")
	m.natsErrors = f.counterVec("nats_client_errors_total", "Asynchronous errors of the box's own NATS connections, by kind: slow_consumer (messages the client dropped; the server delivers them again after their AckWait) or other. Each is logged with the connection's name.", "kind")
	m.sourceActive = f.gaugeVec("source_last_active_seconds", "Seconds since the source last delivered or heartbeated.", "stream", "source")
	m.storageFull = f.gauge("storage_full", "1 while the box is stopped because its storage is full (nothing is ACKed); it restarts itself when space is freed.")
	m.storageFree = f.gauge("storage_free_bytes", "Bytes available on the filesystem of the box's data dir.")
	m.jetstreamEnabled = f.gauge("jetstream_enabled", "1 while the embedded server's JetStream is enabled.")
	m.storageWritable = f.gauge("storage_writable", "1 while the box's data dir is the one it started on and takes durable writes; 0 while it is stopped because it does not, its disk full included (see leafline_storage_full).")
	m.initSecurity()
	return m
}

// watchCompletions exports the L1 completion service's counters. A later
// call (a new service after a restart) replaces the source; the counters
// then start again from zero, as after a process restart.
func (m *Metrics) watchCompletions(stats func() record.Stats) {
	m.completionStats.Store(&stats)
	m.completionOnce.Do(m.registerCompletions)
}

func (m *Metrics) registerCompletions() {
	stats := func() record.Stats { return (*m.completionStats.Load())() }
	for _, c := range []struct {
		name, help string
		v          func(record.Stats) uint64
	}{
		{"completion_received_total", "Receipts received by the completion service.", func(s record.Stats) uint64 { return s.Received }},
		{"completion_applied_total", "Receipts applied: the first terminal status of an (event_id, processor).", func(s record.Stats) uint64 { return s.Applied }},
		{"completion_duplicates_total", "Duplicate receipts absorbed without being applied again.", func(s record.Stats) uint64 { return s.Duplicates }},
		{"completion_conflicts_total", "Receipts whose status conflicts with the first terminal status.", func(s record.Stats) uint64 { return s.Conflicts }},
		{"completion_redriven_total", "Overdue events published again on the origin stream (end-to-end repair of a lost event or receipt).", func(s record.Stats) uint64 { return s.Redriven }},
		{"completion_quarantined_total", "Malformed or rejected receipts parked on the quarantine stream.", func(s record.Stats) uint64 { return s.Quarantined }},
		{"completion_held_total", "Receipts held because L1 had not seen their event's origin (status origin_unknown); they count for nothing until it is seen.", func(s record.Stats) uint64 { return s.Held }},
		{"completion_held_released_total", "Held receipts counted once the origin showed the event routed to their processor.", func(s record.Stats) uint64 { return s.HeldReleased }},
		{"completion_held_refused_total", "Held receipts set aside once the origin showed the event not routed to their processor.", func(s record.Stats) uint64 { return s.HeldRefused }},
		{"completion_held_limited_total", "Held receipts quarantined because their site held more than completion.held_max_per_site receipts or completion.held_max_bytes_per_site bytes for events L1 has not seen; the oldest go first (refusal held_limit).", func(s record.Stats) uint64 { return s.HeldLimited }},
		{"completion_origin_unidentified_total", "Origin messages the tracker could not track (no usable event_id, or no valid expected set), redeliveries included; leafline_completion_origin_unidentified is the durable count of the first kind.", func(s record.Stats) uint64 { return s.OriginSkipped }},
		{"completion_origin_reused_total", "Origin messages that reused a known event_id with another payload (the first publication stands; the event is marked a conflict).", func(s record.Stats) uint64 { return s.OriginReused }},
	} {
		m.f.counterFunc(c.name, c.help, func() float64 { return float64(c.v(stats())) })
	}
}

// watchState exports L1's completion state: whether it is ready, whether
// it was rebuilt from its log at start, how far it has folded the log and
// how often another box appended first. A later watchState (a new state
// after a restart) replaces the source.
func (m *Metrics) watchState(st *state.State) {
	m.state.Store(st)
	m.stateOnce.Do(func() {
		stats := func() state.Stats {
			if st := m.state.Load(); st != nil {
				return st.Stats()
			}
			return state.Stats{}
		}
		b := func(v bool) float64 {
			if v {
				return 1
			}
			return 0
		}
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "completion_state_ready", ConstLabels: m.f.labels,
			Help: "1 when L1's completion state has folded its log as far as it reached at start (until then status queries answer not ready and /readyz is 503)."},
			func() float64 { return b(stats().Ready) }))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "completion_state_rebuilt", ConstLabels: m.f.labels,
			Help: "1 when the local completion state file was rebuilt from the completion log at start (missing, unreadable, or made from another log)."},
			func() float64 { return b(stats().Rebuilt != "") }))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "completion_log_applied", ConstLabels: m.f.labels,
			Help: "The completion log sequence folded into the local state file."},
			func() float64 { return float64(stats().Applied) }))
		m.f.counterFunc("completion_log_conflicts_total", "Appends to the completion log that another L1 box made first (the batch was decided again).",
			func() float64 { return float64(stats().Conflicts) })
	})
}

// Registry is the box's metric registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Value is the current value of the box's counter or gauge name (with its
// leafline_ prefix) in the first series whose labels include labels; 0
// when the box has no such series.
func (m *Metrics) Value(name string, labels map[string]string) (float64, error) {
	return gatherValue(m.reg, name, labels)
}

// gatherValue is Value over any gatherer.
func gatherValue(g prometheus.Gatherer, name string, labels map[string]string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), nil
			}
			return m.GetGauge().GetValue(), nil
		}
	}
	return 0, nil
}

type factory struct {
	reg    *prometheus.Registry
	labels prometheus.Labels
}

const namespace = "leafline"

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help, ConstLabels: f.labels})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterFunc(name, help string, fn func() float64) {
	f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help, ConstLabels: f.labels}, fn))
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help, ConstLabels: f.labels}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help, ConstLabels: f.labels})
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help, ConstLabels: f.labels}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Name: name, Help: help, ConstLabels: f.labels,
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 100µs .. ~13s
	})
	f.reg.MustRegister(h)
	return h
}
