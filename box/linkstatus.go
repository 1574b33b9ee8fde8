package box

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// linkStatus remembers why the box's upstream leafnode link is down: the
// last error the embedded server logged about it (a refused TLS handshake,
// an authorization violation, an unreachable upstream), the last reason it
// closed, and what a local check of the box's own certificates found.
//
// Only lines about the upstream link count: nats-server prefixes a
// connection's lines with the remote address, so a line about a
// downstream site's connection (whose address is that site's) is ignored.
type linkStatus struct {
	// upHost and upPort are the upstream URL's; upHost is "" when it is a
	// DNS name (the log shows the resolved address, so only the port is
	// compared).
	upHost, upPort string

	mu        sync.Mutex
	err       string
	errAt     time.Time
	closed    string
	closedAt  time.Time
	preflight []string
}

func (l *linkStatus) setUpstream(u *url.URL) {
	l.upPort = u.Port()
	if net.ParseIP(u.Hostname()) != nil {
		l.upHost = u.Hostname()
	}
}

// aboutUpstream reports whether a server log line is about the upstream
// link.
func (l *linkStatus) aboutUpstream(msg string) bool {
	if l.upPort == "" {
		return false
	}
	if addr, rest, ok := strings.Cut(msg, " - lid:"); ok && rest != "" {
		host, port, err := net.SplitHostPort(addr)
		return err == nil && port == l.upPort && (l.upHost == "" || host == l.upHost)
	}
	// Server-level lines about the remote (dial errors) name it.
	m := strings.ToLower(msg)
	return strings.Contains(m, "remote server") || strings.Contains(m, "leafnode remote")
}

// observeError records an error or warning line about the upstream link.
func (l *linkStatus) observeError(msg string) {
	if !l.aboutUpstream(msg) {
		return
	}
	l.mu.Lock()
	l.err, l.errAt = msg, time.Now()
	l.mu.Unlock()
}

// observeNotice records a notice that the upstream link closed.
func (l *linkStatus) observeNotice(msg string) {
	if !strings.Contains(msg, "connection closed") || !l.aboutUpstream(msg) {
		return
	}
	l.mu.Lock()
	l.closed, l.closedAt = msg, time.Now()
	l.mu.Unlock()
}

// report says why the link is down, or "" if nothing is known.
func (l *linkStatus) report(now time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	switch {
	case l.err != "" && !l.errAt.Before(l.closedAt.Add(-2*time.Second)):
		// The error explains the closure that follows it.
		parts = append(parts, l.err+" ("+now.Sub(l.errAt).Round(time.Second).String()+" ago)")
	case l.closed != "":
		parts = append(parts, l.closed+" ("+now.Sub(l.closedAt).Round(time.Second).String()+" ago)")
	}
	parts = append(parts, l.preflight...)
	return strings.Join(parts, "; ")
}

// UpstreamError says why the box's upstream leafnode link is down, or ""
// while the link is up or when nothing is known yet.
//
// /readyz reports it as upstream_error; readiness does not depend on it,
// because an edge goes on working while its link is down.
//
// NOTE: under TLS 1.3 a dialling box does not learn why the upstream
// refused its client certificate (it only sees the connection close): that
// reason is in the upstream's log. The local certificate checks
// (certificateFindings) cover the usual causes.
func UpstreamError(s *server.Server) string {
	if s == nil || UpstreamConnected(s) {
		return ""
	}
	l, ok := s.Logger().(*serverLog)
	if !ok {
		return ""
	}
	return l.link.report(time.Now())
}

// certificateFindings checks the box's own leafnode certificates: expired
// or not yet valid, and a client certificate that the CA trusted for the
// upstream did not sign (with one private CA for every site, the upstream
// refuses it).
func certificateFindings(opts *server.Options, now time.Time) []string {
	var out []string
	check := func(what string, tc *tls.Config, roots *x509.CertPool) {
		if tc == nil || len(tc.Certificates) == 0 {
			return
		}
		c := tc.Certificates[0]
		leaf := c.Leaf
		if leaf == nil && len(c.Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(c.Certificate[0])
		}
		if leaf == nil {
			return
		}
		switch {
		case now.After(leaf.NotAfter):
			out = append(out, fmt.Sprintf("%s (CN=%s) expired at %s", what, leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339)))
			return
		case now.Before(leaf.NotBefore):
			out = append(out, fmt.Sprintf("%s (CN=%s) is not valid before %s", what, leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339)))
			return
		}
		if roots == nil {
			return
		}
		inter := x509.NewCertPool()
		for _, der := range c.Certificate[1:] {
			if ic, err := x509.ParseCertificate(der); err == nil {
				inter.AddCert(ic)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			out = append(out, fmt.Sprintf("%s (CN=%s) does not verify against the CA trusted for the upstream (%v); an upstream using that CA refuses it", what, leaf.Subject.CommonName, err))
		}
	}
	if tc := opts.LeafNode.TLSConfig; tc != nil {
		check("the leafnode listener's certificate", tc, nil)
	}
	for _, r := range opts.LeafNode.Remotes {
		if r.TLSConfig != nil {
			check("this box's client certificate for the upstream", r.TLSConfig, r.TLSConfig.RootCAs)
		}
	}
	return out
}
