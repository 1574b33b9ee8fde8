// Package syntax checks the names, host names, ports and URLs that a
// leafline configuration holds.
package syntax

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// HostPort reports why s is not host:port with a numeric port in
// minPort..65535, or nil. An empty host is allowed only if emptyHost.
func HostPort(s string, minPort int, emptyHost bool) error {
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
	if err := Host(host); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if err := Port(port, minPort); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	return nil
}

// Host accepts an IP address or a DNS name of letters, digits, '-'
// and '_' (empty is checked by callers).
func Host(h string) error {
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

// Port accepts a decimal port in minPort..65535.
func Port(p string, minPort int) error {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || int(n) < minPort {
		return fmt.Errorf("port %q must be a number in %d..65535", p, minPort)
	}
	return nil
}

// IsLoopback reports whether host names this machine's loopback interface.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ServerURL checks a URL a box dials: one of schemes (named in
// schemeNames), no password (hint says where it belongs), a host and a port.
func ServerURL(s string, schemes map[string]bool, schemeNames, hint string) error {
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
	if err := Host(u.Hostname()); err != nil {
		return err
	}
	if u.Port() == "" {
		return errors.New("URL has no port")
	}
	return Port(u.Port(), 1)
}

// isNameByte reports whether c may appear in a name or a DNS label.
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// Name reports why s is not a name of at most max bytes drawn from
// [A-Za-z0-9_-], or nil.
func Name(s string, max int) error {
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

// HeaderName reports why s is not an HTTP/NATS header field name.
func HeaderName(s string) error {
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

// TableName reports whether s is a PostgreSQL table name leafline
// accepts: "table" or "schema.table", each an unquoted identifier.
func TableName(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return false
	}
	for _, part := range parts {
		if part == "" || len(part) > 63 || ('0' <= part[0] && part[0] <= '9') {
			return false
		}
		for _, r := range part {
			if !(r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
				return false
			}
		}
	}
	return true
}
