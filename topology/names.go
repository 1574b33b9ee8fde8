package topology

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

const (
	// maxSiteName bounds site names and domains in bytes.
	maxSiteName = 64
	// maxStreamName bounds stream names in bytes.
	maxStreamName = 32
	// maxConsumerName bounds consumer and bucket names in bytes.
	maxConsumerName = 64
)

// upstreamSchemes are the URL schemes a leafnode remote may use.
var upstreamSchemes = map[string]bool{"nats-leaf": true, "tls": true, "nats": true, "ws": true, "wss": true}

// sourceDeliverSpace holds every SourceDeliverSubject: no configured subject
// may overlap it, or a stream would capture another stream's sourcing traffic.
const sourceDeliverSpace = "leafline.src.>"

// directInboxSpace holds every DirectInboxPrefix: no configured subject may
// overlap it, or a stream would capture a direct-mode edge's deliveries.
const directInboxSpace = "leafline.direct.>"

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// checkName reports why s is not a name of at most max bytes drawn from
// [A-Za-z0-9_-], or nil.
func checkName(s string, max int) error {
	if s == "" {
		return errors.New("required")
	}
	if len(s) > max {
		return fmt.Errorf("%q is %d bytes; at most %d are allowed", s, len(s), max)
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return fmt.Errorf("%q contains %q; only letters, digits, '_' and '-' are allowed", s, s[i:i+1])
		}
	}
	return nil
}

// checkHeaderName reports why s is not an HTTP/NATS header field name.
func checkHeaderName(s string) error {
	if s == "" {
		return errors.New("required")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isNameByte(c) && !strings.ContainsRune("!#$%&'*+.^`|~", rune(c)) {
			return fmt.Errorf("header name %q contains %q; a header name is letters, digits and !#$%%&'*+-.^_`|~", s, s[i:i+1])
		}
	}
	return nil
}

// checkHostPort reports why s is not host:port with a numeric port in
// minPort..65535, or nil. An empty host is allowed only if emptyHost.
func checkHostPort(s string, minPort int, emptyHost bool) error {
	if s == "" {
		return errors.New("required")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	if host == "" && !emptyHost {
		return fmt.Errorf("%q has no host; other sites dial this address", s)
	}
	if err := checkHost(host); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if err := checkPort(port, minPort); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	return nil
}

// checkHost accepts an IP address or a DNS name of letters, digits, '-'
// and '_' (empty is checked by callers).
func checkHost(h string) error {
	if h == "" || net.ParseIP(h) != nil {
		return nil
	}
	if len(h) > 253 {
		return errors.New("host name is longer than 253 bytes")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host %q is not a valid IP address or DNS name", h)
		}
		for i := 0; i < len(label); i++ {
			if !isNameByte(label[i]) {
				return fmt.Errorf("host %q is not a valid IP address or DNS name", h)
			}
		}
	}
	return nil
}

// checkPort accepts a decimal port in minPort..65535.
func checkPort(p string, minPort int) error {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || int(n) < minPort {
		return fmt.Errorf("port %q must be a number in %d..65535", p, minPort)
	}
	return nil
}

// isLoopbackHost reports whether host names this machine's loopback interface.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkUpstreamURL reports why s is not a leafnode remote URL. The URL is
// never quoted back: it may carry credentials.
func checkUpstreamURL(s string) error {
	return checkServerURL(s, upstreamSchemes, "nats-leaf, tls, nats, ws, wss", "leafnode.upstream_auth.password_file or password_env")
}

// checkServerURL checks a URL a box dials: one of schemes (named in
// schemeNames), no password (hint says where it belongs), a host and a port.
func checkServerURL(s string, schemes map[string]bool, schemeNames, hint string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a valid URL")
	}
	if !schemes[u.Scheme] {
		return fmt.Errorf("scheme %q is not one of %s", u.Scheme, schemeNames)
	}
	if _, ok := u.User.Password(); ok {
		return fmt.Errorf("URL carries a password, which would be printed with the config; put it in %s", hint)
	}
	if u.Hostname() == "" {
		return errors.New("URL has no host")
	}
	if err := checkHost(u.Hostname()); err != nil {
		return err
	}
	if u.Port() == "" {
		return errors.New("URL has no port")
	}
	return checkPort(u.Port(), 1)
}
