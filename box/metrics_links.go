package box

import (
	"sort"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

// LinkBytes is what one leafnode link has moved, seen from this box: In
// came from the site at the other end, Out went to it. They count message
// bytes (headers and payload, as nats-server's leafnode connection
// statistics do), the same whatever the hop transport: not the protocol
// lines around each message, and before compression, so they measure how
// much a link carries, not what a metered line bills (see
// docs/guide/links.md).
type LinkBytes struct {
	In, Out int64
}

// linkBytes totals each leafnode link's bytes across its connections: a
// reconnected link, or a server started again, begins its counts at zero,
// and the totals go on from where the closed connection was last read.
// The bytes a connection moved after its last read and before it closed
// are not counted, so the totals are exact only when read more often than
// links drop (a hub reads them every second for its link beat).
type linkBytes struct {
	mu     sync.Mutex
	srv    *server.Server
	closed map[string]LinkBytes // by link: connections gone
	open   map[uint64]openLink  // by connection id, of srv
}

type openLink struct {
	link string
	b    LinkBytes
}

func newLinkBytes() *linkBytes {
	return &linkBytes{closed: map[string]LinkBytes{}, open: map[uint64]openLink{}}
}

// read returns every link's totals, by the name of the site at its other
// end (a box's server name is its site's name), including links that are
// down now. srv is the box's current server, nil while there is none.
func (lb *linkBytes) read(srv *server.Server) map[string]LinkBytes {
	var leafs []*server.LeafInfo
	if srv != nil {
		if lz, err := srv.Leafz(nil); err == nil {
			leafs = lz.Leafs
		}
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if srv != lb.srv {
		// Another server: its connection ids start again.
		lb.foldAll()
		lb.srv = srv
	}
	seen := make(map[uint64]bool, len(leafs))
	for _, l := range leafs {
		if l.Name == "" {
			continue // still in its handshake
		}
		seen[l.ID] = true
		lb.open[l.ID] = openLink{link: l.Name, b: LinkBytes{In: l.InBytes, Out: l.OutBytes}}
	}
	for id, o := range lb.open {
		if !seen[id] {
			lb.fold(id, o)
		}
	}
	out := make(map[string]LinkBytes, len(lb.closed)+len(lb.open))
	for link, b := range lb.closed {
		out[link] = b
	}
	for _, o := range lb.open {
		t := out[o.link]
		t.In += o.b.In
		t.Out += o.b.Out
		out[o.link] = t
	}
	return out
}

func (lb *linkBytes) foldAll() {
	for id, o := range lb.open {
		lb.fold(id, o)
	}
}

func (lb *linkBytes) fold(id uint64, o openLink) {
	t := lb.closed[o.link]
	t.In += o.b.In
	t.Out += o.b.Out
	lb.closed[o.link] = t
	delete(lb.open, id)
}

// linkMetrics exports leafline_link_bytes_total{link, direction} from the
// box's linkBytes.
type linkMetrics struct {
	once  sync.Once
	desc  *prometheus.Desc
	bytes *linkBytes
	srv   func() *server.Server

	capOnce sync.Once
	caps    *prometheus.GaugeVec // see setLinkCap
}

// setLinkCap exports the bandwidth cap, in bytes a second, on what this
// box's relay pulls across its link to the site named link (the
// topology's bandwidth): leafline_link_bandwidth_cap_bytes_per_second
// {link, direction="in"}, beside that link's leafline_link_bytes_total.
// The other direction is the other end's relay, and its cap is exported
// there. An uncapped link has no series.
func (m *Metrics) setLinkCap(link string, perSecond int64) {
	m.links.capOnce.Do(func() {
		m.links.caps = m.f.gaugeVec("link_bandwidth_cap_bytes_per_second",
			"The cap, in message bytes a second (headers and payload, as leafline_link_bytes_total counts them), on what this box's relay pulls across its leafnode link to the site named by link.",
			"link", "direction")
	})
	m.links.caps.WithLabelValues(link, "in").Set(float64(perSecond))
}

// watchLinks exports each leafnode link's bytes, reading the box's current
// server through srv; the first call registers, later ones do nothing.
func (m *Metrics) watchLinks(srv func() *server.Server) {
	m.links.once.Do(func() {
		m.links.desc = prometheus.NewDesc(Namespace+"_link_bytes_total",
			"Message bytes (headers and payload, before compression) that this box's leafnode link to the site named by link has moved: direction in from that site, out to it.",
			[]string{"link", "direction"}, m.f.labels)
		m.links.srv = srv
		m.f.reg.MustRegister(&m.links)
	})
}

// LinkTotals returns every link's bytes (see linkBytes.read).
func (m *Metrics) LinkTotals(srv *server.Server) map[string]LinkBytes {
	return m.links.bytes.read(srv)
}

func (l *linkMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

func (l *linkMetrics) Collect(ch chan<- prometheus.Metric) {
	totals := l.bytes.read(l.srv())
	links := make([]string, 0, len(totals))
	for link := range totals {
		links = append(links, link)
	}
	sort.Strings(links)
	for _, link := range links {
		b := totals[link]
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.CounterValue, float64(b.In), link, "in")
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.CounterValue, float64(b.Out), link, "out")
	}
}
