package box

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// securityMetrics count the link violations the embedded server reported.
type securityMetrics struct {
	violations *prometheus.CounterVec // kind, conn

	last atomic.Pointer[LinkViolation]
}

// Link violation kinds (the kind label of leafline_link_violations_total).
const (
	ViolationPublish   = "publish"   // a message on a subject the connection may not publish
	ViolationSubscribe = "subscribe" // an interest in a subject it may not receive
	ViolationAuth      = "auth"      // credentials refused
	ViolationTLS       = "tls"       // TLS handshake refused (certificate)
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
	for _, k := range []string{ViolationPublish, ViolationSubscribe, ViolationAuth, ViolationTLS} {
		for _, c := range []string{"leafnode", "client"} {
			m.sec.violations.WithLabelValues(k, c)
		}
	}
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
		v.Kind = ViolationPublish
	case strings.Contains(msg, "Subscription Violation"):
		v.Kind = ViolationSubscribe
	case strings.Contains(msg, "authentication error"):
		v.Kind = ViolationAuth
	case strings.Contains(msg, "TLS ") && strings.Contains(msg, "handshake error"):
		v.Kind = ViolationTLS
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
