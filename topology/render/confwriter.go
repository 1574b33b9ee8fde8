package render

import (
	"fmt"
	"strconv"
	"strings"
)

// q quotes a string for a nats-server configuration file. A quoted string
// is literal there: "$" in it is not a variable reference.
func q(s string) string { return strconv.Quote(s) }

// qlist writes ss as a list of quoted strings.
func qlist(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = q(s)
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// confWriter writes an indented nats-server configuration.
type confWriter struct {
	b     strings.Builder
	depth int
}

func (w *confWriter) line(format string, a ...any) {
	w.b.WriteString(strings.Repeat("  ", w.depth))
	fmt.Fprintf(&w.b, format, a...)
	w.b.WriteByte('\n')
}
func (w *confWriter) blank()                          { w.b.WriteByte('\n') }
func (w *confWriter) comment(format string, a ...any) { w.line("# "+format, a...) }
func (w *confWriter) kv(k, v string)                  { w.line("%s: %s", k, v) }
func (w *confWriter) open(k string)                   { w.line("%s {", k); w.depth++ }
func (w *confWriter) openAnon()                       { w.line("{"); w.depth++ }
func (w *confWriter) close()                          { w.depth--; w.line("}") }
func (w *confWriter) openList(k string)               { w.line("%s: [", k); w.depth++ }
func (w *confWriter) closeList()                      { w.depth--; w.line("]") }
func (w *confWriter) String() string                  { return w.b.String() }
