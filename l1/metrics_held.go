package l1

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/completion"
)

// heldMetrics export, per site, what L1 holds of receipts for events it
// has not seen (completion.Service.HeldBySite), against the bounds
// completion.held_max_per_site and held_max_bytes_per_site.
type heldMetrics struct {
	source atomic.Pointer[func() map[string]completion.HeldUsage]
	edges  atomic.Pointer[[]string] // always exported, 0 while they hold nothing
	once   sync.Once
	// receipts and bytes describe leafline_completion_held_receipts{site}
	// and leafline_completion_held_bytes{site}.
	receipts, bytes *prometheus.Desc
}

// watchHeld exports the completion service's held receipts per site, for
// each of edges and any other site that holds some; like watchCompletions,
// a later call replaces the source.
func (m *metrics) watchHeld(bySite func() map[string]completion.HeldUsage, edges []string) {
	m.held.source.Store(&bySite)
	m.held.edges.Store(&edges)
	m.held.once.Do(func() {
		m.held.receipts = prometheus.NewDesc(box.Namespace+"_completion_held_receipts",
			"Receipts L1 holds for events it has not seen (status origin_unknown), by the edge site that sent them; bounded by completion.held_max_per_site.",
			[]string{"edge"}, m.Labels())
		m.held.bytes = prometheus.NewDesc(box.Namespace+"_completion_held_bytes",
			"Bytes of the receipts L1 holds for events it has not seen, by the edge site that sent them; bounded by completion.held_max_bytes_per_site.",
			[]string{"edge"}, m.Labels())
		m.Register(&m.held)
	})
}

// Describe implements prometheus.Collector.
func (h *heldMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.receipts
	ch <- h.bytes
}

// Collect implements prometheus.Collector.
func (h *heldMetrics) Collect(ch chan<- prometheus.Metric) {
	src := h.source.Load()
	if src == nil {
		return
	}
	usage := (*src)()
	sites := maps.Clone(usage)
	if edges := h.edges.Load(); edges != nil {
		for _, e := range *edges {
			sites[e] = usage[e]
		}
	}
	for site, u := range sites {
		ch <- prometheus.MustNewConstMetric(h.receipts, prometheus.GaugeValue, float64(u.Receipts), site)
		ch <- prometheus.MustNewConstMetric(h.bytes, prometheus.GaugeValue, float64(u.Bytes), site)
	}
}
