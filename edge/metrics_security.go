package edge

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafline/leafline/completion"
	"github.com/prometheus/client_golang/prometheus"
)

// securityMetrics count refused identity: the receipts L1 quarantined, per
// reason, and the link violations the embedded server reported.
type securityMetrics struct {
	refusals     atomic.Pointer[func() map[string]uint64]
	refusalsOnce sync.Once
	violations   *prometheus.CounterVec // kind, conn
	// directAltered counts the checks that found a direct edge's consumer
	// on L1 not the shape L1 creates, or deleted (role_l1_direct_guard.go).
	directAltered *prometheus.CounterVec // edge

	last atomic.Pointer[LinkViolation]
}

// Link violation kinds (the kind label of leafline_link_violations_total).
const (
	violationPublish   = "publish"   // a message on a subject the connection may not publish
	violationSubscribe = "subscribe" // an interest in a subject it may not receive
	violationAuth      = "auth"      // credentials refused
	violationTLS       = "tls"       // TLS handshake refused (certificate)
)

// LinkViolation is the last violation the box's server reported: what a
// connection tried (kind), on which connection (conn: leafnode or client,
// with its address and id) and the detail the server logged (a subject or
// the refused credentials' cause; never a payload).
type LinkViolation struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Conn   string    `json:"conn"`
	Detail string    `json:"detail"`
}

func (m *Metrics) initSecurity() {
	m.sec.violations = m.f.counterVec("link_violations_total",
		"Violations the box's server refused: a publish or subscription outside a connection's permissions, refused credentials or TLS (kind), on a leafnode link or a client connection (conn).",
		"kind", "conn")
	m.sec.directAltered = m.f.counterVec("direct_consumer_altered_total",
		"Checks at L1 that found a direct-mode edge's consumer on the origin stream not the shape L1 creates (repaired in place where the server allows), or deleted (created again).",
		"edge")
	for _, k := range []string{violationPublish, violationSubscribe, violationAuth, violationTLS} {
		for _, c := range []string{"leafnode", "client"} {
			m.sec.violations.WithLabelValues(k, c)
		}
	}
}

// watchRefusals exports the completion service's quarantined receipts per
// reason (leafline_completion_refused_total{reason}); like watchCompletions,
// a later call replaces the source.
func (m *Metrics) watchRefusals(refusals func() map[string]uint64) {
	m.sec.refusals.Store(&refusals)
	m.sec.refusalsOnce.Do(func() {
		for _, reason := range completion.RefusalReasons {
			m.f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace:   namespace,
				Name:        "completion_refused_total",
				Help:        "Receipts the completion service quarantined, by reason: a receipt that disagrees with its subject, speaks for another processor than its site, comes from a processor the event was not routed to, or fails its signature, among others.",
				ConstLabels: mergeLabels(m.f.labels, prometheus.Labels{"reason": reason}),
			}, func() float64 { return float64((*m.sec.refusals.Load())()[reason]) }))
		}
	})
}

func mergeLabels(a, b prometheus.Labels) prometheus.Labels {
	out := prometheus.Labels{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// LastLinkViolation is the last violation the box's server reported, or nil.
func (m *Metrics) LastLinkViolation() *LinkViolation { return m.sec.last.Load() }

// linkViolation classifies a server log line: the kind of violation it
// reports and the connection it names, or ok=false. The server prefixes a
// connection's lines with its address and id: "lid:" for a leafnode,
// "cid:" for a client.
func linkViolation(msg string) (v LinkViolation, ok bool) {
	switch {
	case strings.Contains(msg, "Publish Violation"):
		v.Kind = violationPublish
	case strings.Contains(msg, "Subscription Violation"):
		v.Kind = violationSubscribe
	case strings.Contains(msg, "authentication error"):
		v.Kind = violationAuth
	case strings.Contains(msg, "TLS ") && strings.Contains(msg, "handshake error"):
		v.Kind = violationTLS
	default:
		return v, false
	}
	switch {
	case strings.Contains(msg, " - lid:"):
		v.Conn = "leafnode"
	case strings.Contains(msg, " - cid:"):
		v.Conn = "client"
	default:
		return LinkViolation{}, false
	}
	v.Detail = msg
	return v, true
}

// violationHook returns the serverLog hook that counts each violation and
// logs it as leafline's own line.
func (m *Metrics) violationHook(log *slog.Logger) func(string) {
	return func(msg string) {
		v, ok := linkViolation(msg)
		if !ok {
			return
		}
		v.At = time.Now().UTC()
		m.sec.violations.WithLabelValues(v.Kind, v.Conn).Inc()
		m.sec.last.Store(&v)
		log.Warn("link violation refused", "kind", v.Kind, "conn", v.Conn, "detail", v.Detail)
	}
}
