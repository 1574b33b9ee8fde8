package topology

import (
	"errors"
	"fmt"
	"strings"

	"github.com/leafline/leafline/topology/internal/strictjson"
)

// ErrInvalid matches, with errors.Is, every error that a decoding or
// validation problem causes: a malformed file, an unknown or duplicate key,
// a value out of range, a topology that does not hold together. It does not
// match an I/O error such as a missing config file.
var ErrInvalid = errors.New("topology: invalid configuration")

// Problem is one thing wrong with a file.
type Problem struct {
	// Path locates the value, e.g. "sites[2].upstream" or
	// "delivery.retry.backoff_max_ms". Empty means the file as a whole.
	Path string
	// Msg says what is wrong and, where it helps, what is allowed.
	Msg string
}

// String formats the problem as "<path>: <msg>", or just the message when
// the path is empty.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Msg
	}
	return p.Path + ": " + p.Msg
}

// ValidationError lists every problem found in one file. It matches
// ErrInvalid with errors.Is.
type ValidationError struct {
	// Source names the file (its path as given), or is empty for a value
	// built in memory.
	Source string
	// Problems is never empty, in the order they were found.
	Problems []Problem
}

// Error lists every problem, one per line, as "<source>: <path>: <msg>".
func (e *ValidationError) Error() string {
	if len(e.Problems) == 0 {
		return e.prefix() + "invalid configuration"
	}
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.prefix())
		b.WriteString(p.String())
	}
	return b.String()
}

func (e *ValidationError) prefix() string {
	if e.Source == "" {
		return ""
	}
	return e.Source + ": "
}

// Is reports whether target is ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// problems collects Problems during decoding and validation.
type problems []Problem

// add records a problem at path; format and args build the message.
func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// err returns nil when nothing was recorded, else a *ValidationError.
func (p problems) err(source string) error {
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{Source: source, Problems: append([]Problem(nil), p...)}
}

// fieldPath and elemPath build a Problem's path in the syntax of the
// strict decoder ("sites[2].leafnode", `events["a b"]`), so that decoding
// and validation problems name a value alike.
var (
	fieldPath = strictjson.Field
	elemPath  = strictjson.Elem
)
