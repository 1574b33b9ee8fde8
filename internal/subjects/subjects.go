// Package subjects checks and matches NATS subjects the way leafline's
// configurations name them.
package subjects

import (
	"errors"
	"strings"
)

// ValidateLiteral accepts a literal subject: dot-separated non-empty tokens
// without wildcards or whitespace.
func ValidateLiteral(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return errors.New("empty token")
		}
		if strings.ContainsAny(tok, "*> \t\r\n") {
			return errors.New("wildcards and whitespace not allowed")
		}
	}
	return nil
}

// Matches reports whether literal subject subj matches filter, which
// may contain '*' and a trailing '>'.
func Matches(filter, subj string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subj, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}
