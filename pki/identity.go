package pki

import (
	"crypto/x509"
	"net"
	"net/url"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/topology"
)

// A site's certificate is its identity on the wire, and it is only what
// its role needs: an edge's authenticates it as a client and can serve no
// TLS connection, so a stolen edge certificate cannot pass for the hub to
// another edge; L1's serves its listener; a hub's does both (it listens
// for edges and dials L1). A certificate names the addresses of its own
// listener only — loopback names only when asked for (a system on one
// machine) — and names its site in a URI, which binds it to the site's
// nkey at a leafline listener (see the edge package's link authentication).

// siteURIScheme and siteURIPrefix make the URI by which a certificate names
// its site: "leafline:site:<name>".
const (
	siteURIScheme = "leafline"
	siteURIPrefix = "site:"
)

// SiteURI is the URI by which a certificate names site.
func SiteURI(site string) *url.URL {
	return &url.URL{Scheme: siteURIScheme, Opaque: siteURIPrefix + site}
}

// CertSite returns the site a certificate names (SiteURI); ok is false for
// a certificate that names none, such as one from an operator's own PKI.
func CertSite(cert *x509.Certificate) (site string, ok bool) {
	for _, u := range cert.URIs {
		if u.Scheme == siteURIScheme && strings.HasPrefix(u.Opaque, siteURIPrefix) {
			return strings.TrimPrefix(u.Opaque, siteURIPrefix), true
		}
	}
	return "", false
}

// certUsage is what the certificate of a site with that role is for.
func certUsage(r topology.Role) []x509.ExtKeyUsage {
	switch r {
	case topology.RoleEdge:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case topology.RoleL1:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
}

// siteHosts are the names a site's certificate is valid for as a server:
// none for a site that does not listen; else the host of its leafnode
// listen address (unless it is a wildcard address), o.Hosts and, with
// o.Loopback, the loopback names.
func siteHosts(s *topology.Site, o CredentialOptions) []string {
	if s.Leafnode.Listen == "" {
		return nil
	}
	var hosts []string
	if h, _, err := net.SplitHostPort(s.Leafnode.Listen); err == nil && h != "" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, h)
		}
	}
	hosts = append(hosts, o.Hosts...)
	if o.Loopback {
		hosts = append(hosts, "localhost", "127.0.0.1", "::1")
	}
	return hosts
}

// writeReceiptKey writes a new receipt-signing nkey seed to path (mode
// 0600, never over an existing file) and returns path and its public key.
func writeReceiptKey(path string) (file, pub string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", "", err
	}
	seed, _ := kp.Seed()
	pub, _ = kp.PublicKey()
	if err := writeNew(path, append(seed, '\n'), 0o600); err != nil {
		return "", "", err
	}
	return path, pub, nil
}
