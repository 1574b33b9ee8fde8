package relay

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports holds the layering rule: relay imports the standard library
// and the NATS client libraries only; no other leafline package.
func TestImports(t *testing.T) {
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
			std := !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
			nats := strings.HasPrefix(path, "github.com/nats-io/nats.go") ||
				strings.HasPrefix(path, "github.com/synadia-io/orbit.go/jetstreamext")
			if !std && !nats {
				t.Errorf("%s imports %s; relay may import only the standard library and the NATS clients", f, path)
			}
		}
	}
}
