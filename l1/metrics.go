package l1

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
)

// metrics are the l1 role's metrics in its box's registry. The completion
// service and its state are new after each restart (a full disk): each
// watch call replaces the source, and registers the series the first time.
type metrics struct {
	*box.Metrics

	completionStats atomic.Pointer[func() record.Stats]
	completionOnce  sync.Once
	state           atomic.Pointer[state.State]
	stateOnce       sync.Once

	unidentified     atomic.Pointer[func(context.Context) (int64, error)]
	unidentifiedOnce sync.Once

	refusals     atomic.Pointer[func() map[string]uint64]
	refusalsOnce sync.Once

	// directAltered counts the checks that found a direct edge's consumer
	// on L1 not the shape L1 creates, or deleted (direct_guard.go).
	directAltered *prometheus.CounterVec // edge
	// resent counts the events sent again to an edge its hub released
	// (resend.go).
	resent *prometheus.CounterVec // edge
	// retiredEvents counts the events closed for a retired site
	// (retire.go).
	retiredEvents *prometheus.CounterVec // edge

	held    heldMetrics    // metrics_held.go
	cleanup cleanupMetrics // cleanup.go
}

func newMetrics(m *box.Metrics) *metrics {
	return &metrics{
		Metrics: m,
		directAltered: m.CounterVec("direct_consumer_altered_total",
			"Checks at L1 that found a direct-mode edge's consumer on the origin stream not the shape L1 creates (repaired in place where the server allows), or deleted (created again).",
			"edge"),
		retiredEvents: m.CounterVec("completion_retired_events_total",
			"Events L1 closed with the processor status retired because their site was retired or removed from the topology before it reported them.",
			"edge"),
		resent: m.CounterVec("completion_resent_total",
			"Events L1 sent again, to the edge alone, after the edge's hub released them past its backlog budget (topology backlog).",
			"edge"),
	}
}

// withLabel is the box's labels and one more.
func (m *metrics) withLabel(name, value string) prometheus.Labels {
	l := maps.Clone(m.Labels())
	l[name] = value
	return l
}

// watchCompletions exports the L1 completion service's counters. A later
// call (a new service after a restart) replaces the source; the counters
// then start again from zero, as after a process restart.
func (m *metrics) watchCompletions(stats func() record.Stats) {
	m.completionStats.Store(&stats)
	m.completionOnce.Do(m.registerCompletions)
}

func (m *metrics) registerCompletions() {
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
		m.CounterFunc(c.name, c.help, func() float64 { return float64(c.v(stats())) })
	}
}

// watchState exports L1's completion state: whether it is ready, whether
// it was rebuilt from its log at start, how far it has folded the log and
// how often another box appended first. A later watchState (a new state
// after a restart) replaces the source.
func (m *metrics) watchState(st *state.State) {
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
		m.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: box.Namespace, Name: "completion_state_ready", ConstLabels: m.Labels(),
			Help: "1 when L1's completion state has folded its log as far as it reached at start (until then status queries answer not ready and /readyz is 503)."},
			func() float64 { return b(stats().Ready) }))
		m.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: box.Namespace, Name: "completion_state_rebuilt", ConstLabels: m.Labels(),
			Help: "1 when the local completion state file was rebuilt from the completion log at start (missing, unreadable, or made from another log)."},
			func() float64 { return b(stats().Rebuilt != "") }))
		m.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: box.Namespace, Name: "completion_log_applied", ConstLabels: m.Labels(),
			Help: "The completion log sequence folded into the local state file."},
			func() float64 { return float64(stats().Applied) }))
		m.CounterFunc("completion_log_conflicts_total", "Appends to the completion log that another L1 box made first (the batch was decided again).",
			func() float64 { return float64(stats().Conflicts) })
	})
}

// watchRefusals exports the completion service's quarantined receipts per
// reason (leafline_completion_refused_total{reason}); like watchCompletions,
// a later call replaces the source.
func (m *metrics) watchRefusals(refusals func() map[string]uint64) {
	m.refusals.Store(&refusals)
	m.refusalsOnce.Do(func() {
		for _, reason := range completion.RefusalReasons {
			m.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace:   box.Namespace,
				Name:        "completion_refused_total",
				Help:        "Receipts the completion service quarantined, by reason: a receipt that disagrees with its subject, speaks for another processor than its site, comes from a processor the event was not routed to, or fails its signature, among others.",
				ConstLabels: m.withLabel("reason", reason),
			}, func() float64 { return float64((*m.refusals.Load())()[reason]) }))
		}
	})
}
