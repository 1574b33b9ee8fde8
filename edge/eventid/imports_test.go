package eventid

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports holds the layering rule: eventid reads the configuration and
// the sink's error classes and nothing else of ours, so that L1 and the
// edge's runner both import it without importing each other.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/leafline/leafline/sink":     true,
		"github.com/leafline/leafline/topology": true,
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
				t.Errorf("%s imports %s; eventid may import only topology and sink of ours", f, path)
			}
		}
	}
}
