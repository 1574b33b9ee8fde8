package outbox

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports holds the layering rule: outbox imports only the standard
// library and bbolt (no other leafline package, nothing NATS).
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
			if !std && path != "go.etcd.io/bbolt" && !strings.HasPrefix(path, "go.etcd.io/bbolt/") {
				t.Errorf("%s imports %s; outbox may import only the standard library and bbolt", f, path)
			}
		}
	}
}
