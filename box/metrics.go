package box

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leafline/leafline/internal/memlimit"
)

// Metrics are one box's Prometheus metrics, in their own registry (several
// boxes may run in one process, as in the demo). Labels are low-cardinality:
// never an event_id.
type Metrics struct {
	reg *prometheus.Registry
	f   factory

	UpstreamConnected prometheus.Gauge
	sourceLag         *prometheus.GaugeVec
	streamBytes       *prometheus.GaugeVec
	streamMsgs        *prometheus.GaugeVec
	streamMaxBytes    *prometheus.GaugeVec
	streamMaxMsgs     *prometheus.GaugeVec
	streamDiscardNew  *prometheus.GaugeVec
	sourceActive      *prometheus.GaugeVec
	trimmed           *prometheus.CounterVec
	natsErrors        *prometheus.CounterVec
	upstreamChanges   *prometheus.CounterVec

	storageFull, storageFree, jetstreamEnabled prometheus.Gauge
	storageWritable                            prometheus.Gauge
	memoryLive, memoryPressure                 prometheus.Gauge

	sec     securityMetrics // see metrics_security.go
	links   linkMetrics     // see metrics_links.go
	backlog backlogMetrics  // see backlog.go
}

// NewMetrics is a registry for one box of site with role (New makes its
// box's; a test of one role's part alone may make its own).
func NewMetrics(site, role string) *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{reg: reg, labels: prometheus.Labels{"site": site, "role": role}}
	m := &Metrics{reg: reg, f: f}
	m.links.bytes = newLinkBytes()
	m.UpstreamConnected = f.gauge("upstream_connected", "1 when the upstream leafnode link is connected.")
	m.sourceLag = f.gaugeVec("source_lag", "Messages the sourced stream is behind its source.", "stream", "source")
	m.memoryLive = f.gauge("memory_heap_live_bytes", "The Go heap live after the last garbage collection (the box's process).")
	m.memoryPressure = f.gauge("memory_pressure", "1 while the box's live heap is within 10% of its Go memory limit or the process holds 5% more than the limit: the collector runs nearly all the time (see /readyz).")
	f.gaugeFunc("memory_limit_bytes", "The process's Go memory limit (memory_limit_bytes, GOMEMLIMIT, the control group's or the role's default; 0: none).", func() float64 {
		return float64(memlimit.Current())
	})
	m.streamBytes = f.gaugeVec("stream_bytes", "Bytes the box's stream holds now (every stream of the box's JetStream).", "stream")
	m.streamMsgs = f.gaugeVec("stream_messages", "Messages the box's stream holds now.", "stream")
	m.streamMaxBytes = f.gaugeVec("stream_max_bytes", "The stream's byte limit (jetstream.max_stream_bytes; -1: none): a stream that reaches it refuses what is published or relayed into it (or, if it discards old messages, drops its oldest), and /readyz says so.", "stream")
	m.streamMaxMsgs = f.gaugeVec("stream_max_messages", "The stream's message limit (-1: none).", "stream")
	m.streamDiscardNew = f.gaugeVec("stream_discard_new", "1 if the stream refuses new messages at its limits (DiscardNew), 0 if it drops its oldest.", "stream")
	m.trimmed = f.counterVec("stream_trimmed_messages_total", "Messages deleted from a stream after every consumer that takes them had them.", "stream")
	m.natsErrors = f.counterVec("nats_client_errors_total", "Asynchronous errors of the box's own NATS connections, by kind: slow_consumer (messages the client dropped; the server delivers them again after their AckWait) or other. Each is logged with the connection's name.", "kind")
	m.upstreamChanges = f.counterVec("link_upstream_changes_total", "Times a relay link found that its upstream stream was not the one its stored messages came from, and took it again from an earlier sequence: kind replaced (the stream was created again: its box replaced, its data dir lost) or rolled_back (it no longer holds what the link stored last: its box restored from an older copy).", "link", "kind")
	m.sourceActive = f.gaugeVec("source_last_active_seconds", "Seconds since the source last delivered or heartbeated.", "stream", "source")
	m.storageFull = f.gauge("storage_full", "1 while the box is stopped because its storage is full (nothing is ACKed); it restarts itself when space is freed.")
	m.storageFree = f.gauge("storage_free_bytes", "Bytes available on the filesystem of the box's data dir.")
	m.jetstreamEnabled = f.gauge("jetstream_enabled", "1 while the embedded server's JetStream is enabled.")
	m.storageWritable = f.gauge("storage_writable", "1 while the box's data dir is the one it started on and takes durable writes; 0 while it is stopped because it does not, its disk full included (see leafline_storage_full).")
	m.initSecurity()
	m.initBacklog()
	return m
}

// Registry is the box's metric registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Value is the current value of the box's counter or gauge name (with its
// leafline_ prefix) in the first series whose labels include labels; 0
// when the box has no such series.
func (m *Metrics) Value(name string, labels map[string]string) (float64, error) {
	return GatherValue(m.reg, name, labels)
}

// GatherValue is Value over any gatherer.
func GatherValue(g prometheus.Gatherer, name string, labels map[string]string) (float64, error) {
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

// Namespace is the prefix of every metric name.
const Namespace = "leafline"

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.labels})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterFunc(name, help string, fn func() float64) {
	f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.labels}, fn))
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.labels}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.labels})
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeFunc(name, help string, fn func() float64) {
	f.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.labels}, fn))
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: f.labels}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: name, Help: help, ConstLabels: f.labels,
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 100µs .. ~13s
	})
	f.reg.MustRegister(h)
	return h
}

// The factory of the box's registry, for the metrics a role adds (in its
// Init: each is registered once per box). Every name gets the leafline_
// prefix and the box's site and role labels.

// Counter registers a counter.
func (m *Metrics) Counter(name, help string) prometheus.Counter { return m.f.counter(name, help) }

// CounterFunc registers a counter read from fn.
func (m *Metrics) CounterFunc(name, help string, fn func() float64) { m.f.counterFunc(name, help, fn) }

// CounterVec registers a counter with labels.
func (m *Metrics) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return m.f.counterVec(name, help, labels...)
}

// Gauge registers a gauge.
func (m *Metrics) Gauge(name, help string) prometheus.Gauge { return m.f.gauge(name, help) }

// GaugeVec registers a gauge with labels.
func (m *Metrics) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return m.f.gaugeVec(name, help, labels...)
}

// GaugeFunc registers a gauge read from fn.
func (m *Metrics) GaugeFunc(name, help string, fn func() float64) {
	m.f.gaugeFunc(name, help, fn)
}

// Histogram registers a histogram of seconds, 100µs to about 13s.
func (m *Metrics) Histogram(name, help string) prometheus.Histogram { return m.f.histogram(name, help) }

// Register registers a collector of the role's own.
func (m *Metrics) Register(c prometheus.Collector) { m.reg.MustRegister(c) }

// Labels are the box's constant labels (site and role).
func (m *Metrics) Labels() prometheus.Labels { return m.f.labels }
