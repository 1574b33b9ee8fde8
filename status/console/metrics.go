package console

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics returns a collector of the console's per-site view, from its
// last sample, for L1's /metrics: what the page shows, for dashboards and
// alerts. Every series has the label "edge" (the edge site) and the
// given constant labels.
//
//	leafline_site_link_up{edge}                        1 online, 0 offline or unknown
//	leafline_site_link_known{edge}                     1 when a fresh beat of the edge's hub says online or offline
//	leafline_site_link_changed_timestamp_seconds{edge} when the link state last changed (as the page's "since")
//	leafline_site_last_receipt_timestamp_seconds{edge} when L1 last recorded a receipt of the edge (0: none seen)
//	leafline_site_pending{edge}                        events waiting for the edge's receipt
//	leafline_site_overdue{edge}                        of those, older than completion.overdue_after
//	leafline_site_dead_lettered{edge}                  events the edge dead-lettered
//	leafline_site_expired{edge}                        events the edge expired (too old when it reached them)
//	leafline_site_counts_ok                            1 when the last sample read the completion service
func (c *Console) Metrics(constLabels prometheus.Labels) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("leafline_"+name, help, labels, constLabels)
	}
	return &collector{c: c,
		up:       d("site_link_up", "1 when the edge's hub says its leafnode link is up (the L1 console's online), else 0.", "edge"),
		known:    d("site_link_known", "1 when a fresh link beat of the edge's hub reached L1, so that site_link_up is known; 0 when the hub or L1's link to it is silent.", "edge"),
		changed:  d("site_link_changed_timestamp_seconds", "Unix time at which the edge's link state last changed, as L1 knows it.", "edge"),
		receipt:  d("site_last_receipt_timestamp_seconds", "Unix time at which L1 last recorded a receipt of the edge; 0 when none was seen since L1 started.", "edge"),
		pending:  d("site_pending", "Events waiting for the edge's receipt at L1.", "edge"),
		overdue:  d("site_overdue", "Events waiting for the edge's receipt for longer than completion.overdue_after.", "edge"),
		dead:     d("site_dead_lettered", "Events the edge dead-lettered.", "edge"),
		expired:  d("site_expired", "Events the edge did not process because they were older than their expiry when it reached them.", "edge"),
		countsOK: d("site_counts_ok", "1 when the console's last sample read the completion service's summary, else 0."),
	}
}

type collector struct {
	c                                                                      *Console
	up, known, changed, receipt, pending, overdue, dead, expired, countsOK *prometheus.Desc
}

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.up, m.known, m.changed, m.receipt, m.pending, m.overdue, m.dead, m.expired, m.countsOK} {
		ch <- d
	}
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	snap := m.c.current()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	ok := 0.0
	if snap.Summary != nil {
		ok = 1
	}
	gauge(m.countsOK, ok)
	for _, s := range snap.Sites {
		up, known := 0.0, 1.0
		switch s.Link.State {
		case "online":
			up = 1
		case "unknown":
			known = 0
		}
		gauge(m.up, up, s.Site)
		gauge(m.known, known, s.Site)
		gauge(m.changed, unix(s.Link.Since), s.Site)
		gauge(m.receipt, unix(s.LastReceipt), s.Site)
		if snap.Summary != nil {
			gauge(m.pending, float64(s.Pending), s.Site)
			gauge(m.overdue, float64(s.Overdue), s.Site)
			gauge(m.dead, float64(s.DeadLettered), s.Site)
			gauge(m.expired, float64(s.Expired), s.Site)
		}
	}
}
