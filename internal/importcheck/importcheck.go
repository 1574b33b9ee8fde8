// Package importcheck holds the module's layering in tests: each package
// names the packages of this module it may import, and Only fails for any
// other. The layers run one way, with no cycles:
//
//	cmd/leafline → edge → runner, sink, receipts, outbox, pki, topology → internal leaves
//
// Imports outside the module (the standard library, NATS, bbolt, …) are
// not its concern.
package importcheck

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Module is this module's import path.
const Module = "github.com/leafline/leafline"

// Only fails t for each import, in a non-test Go file of the current
// directory (a test's working directory is its package's), of a package of
// this module not named in allowed (paths relative to the module root,
// e.g. "topology", "internal/logx").
func Only(t testing.TB, allowed ...string) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			rel, ok := strings.CutPrefix(path, Module+"/")
			if !ok {
				continue
			}
			if !slices.Contains(allowed, rel) {
				t.Errorf("%s imports %s; this package may import only %v of this module", name, rel, allowed)
			}
		}
	}
}
