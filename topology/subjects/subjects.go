// Package subjects checks and matches NATS subjects the way leafline's
// configurations name them.
package subjects

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
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

// Check reports why s is not a valid NATS subject, or nil. Wildcard
// tokens ("*" anywhere, ">" last) are allowed only when wildcards is true.
func Check(s string, wildcards bool) error {
	if s == "" {
		return errors.New("required")
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("subject %q contains whitespace or a control character", s)
		}
	}
	tokens := strings.Split(s, ".")
	for i, tok := range tokens {
		switch {
		case tok == "":
			return fmt.Errorf("subject %q has an empty token (leading, trailing or double dot)", s)
		case (tok == "*" || tok == ">") && !wildcards:
			return fmt.Errorf("subject %q must be literal: no '*' or '>' tokens", s)
		case tok == ">" && i != len(tokens)-1:
			return fmt.Errorf("subject %q: '>' is allowed only as the last token", s)
		case tok != "*" && tok != ">" && strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("subject %q: '*' and '>' are allowed only as whole tokens", s)
		}
	}
	return nil
}

// Overlap reports whether some literal subject matches both a and b.
// Both must be valid subjects.
func Overlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(at) && i < len(bt); i++ {
		x, y := at[i], bt[i]
		if x == ">" || y == ">" {
			return true
		}
		if x != "*" && y != "*" && x != y {
			return false
		}
	}
	return len(at) == len(bt)
}

// Subset reports whether every literal subject that a matches is also
// matched by b. Both must be valid subjects.
func Subset(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i, x := range at {
		if i >= len(bt) {
			return false
		}
		switch y := bt[i]; {
		case y == ">":
			return true
		case x == ">":
			return false
		case y == "*":
		case x != y:
			return false
		}
	}
	return len(at) == len(bt)
}

// Intersect returns the subject that matches exactly the literal subjects
// matched by both a and b, and false when none is. Both must be valid
// subjects.
func Intersect(a, b string) (string, bool) {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	var out []string
	for i := 0; ; i++ {
		switch {
		case i == len(at) && i == len(bt):
			return strings.Join(out, "."), true
		case i == len(at) || i == len(bt):
			return "", false
		}
		switch x, y := at[i], bt[i]; {
		case x == ">":
			return strings.Join(append(out, bt[i:]...), "."), true
		case y == ">":
			return strings.Join(append(out, at[i:]...), "."), true
		case x == "*":
			out = append(out, y)
		case y == "*" || x == y:
			out = append(out, x)
		default:
			return "", false
		}
	}
}
