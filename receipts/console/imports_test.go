package console

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports holds the layering rule: the console imports, of this
// module, only receipts (whose types it shows); nothing of edge, so that
// any L1 can serve it.
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
			if strings.HasPrefix(path, "github.com/leafline/leafline/") && path != "github.com/leafline/leafline/receipts" {
				t.Errorf("%s imports %s; the console may import only receipts of this module", f, path)
			}
		}
	}
}
