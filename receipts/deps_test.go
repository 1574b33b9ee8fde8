package receipts

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoInternalImports holds the layering rule: receipts imports no other
// package of this module, except internal/failpoint (a leaf that imports
// only the standard library; it places the l1.after_kv_write kill point)
// and, in tests, internal/loopback, internal/check and internal/jstest
// (leaves that find ports, poll and start test servers).
func TestNoInternalImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			allowed := path == "github.com/leafline/leafline/internal/failpoint" ||
				(path == "github.com/leafline/leafline/internal/loopback" || path == "github.com/leafline/leafline/internal/check" || path == "github.com/leafline/leafline/internal/jstest") && strings.HasSuffix(name, "_test.go")
			if strings.HasPrefix(path, "github.com/leafline/leafline") && !allowed {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
