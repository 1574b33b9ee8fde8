package runner

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports holds the layering rule: the runner builds on outbox,
// receipts, sink, topology and eventid; it never imports the box (edge)
// that wires it, nor the demo or test harnesses.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/leafline/leafline/edge/eventid":       true,
		"github.com/leafline/leafline/internal/failpoint": true,
		"github.com/leafline/leafline/outbox":             true,
		"github.com/leafline/leafline/receipts":           true,
		"github.com/leafline/leafline/sink":               true,
		"github.com/leafline/leafline/topology":           true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/leafline/") && !allowed[path] {
				t.Errorf("%s imports %s; the runner may import only %v of ours", f, path, keys(allowed))
			}
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
