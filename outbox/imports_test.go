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
// library, bbolt and bbolt's own dependency golang.org/x/sys (for Windows
// file locks); no other leafline package, nothing NATS.
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
			bbolt := path == "go.etcd.io/bbolt" || strings.HasPrefix(path, "go.etcd.io/bbolt/")
			if !std && !bbolt && !strings.HasPrefix(path, "golang.org/x/sys/") {
				t.Errorf("%s imports %s; outbox may import only the standard library, bbolt and golang.org/x/sys", f, path)
			}
		}
	}
}
