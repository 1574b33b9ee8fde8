// Package importcheck holds the module's layering in tests: each package
// names the packages of this module it may import, and Only fails for any
// other. The layers run one way, with no cycles:
//
//	cmd/leafline → leafline → edge, hub, l1 → box, edge/runner, sink, completion, cleanup, status → hop, jsplan, outbox, pki, topology → receipt → internal leaves
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
// directory (a test's working directory is its package's), that allowed
// does not name:
//
//   - a package of this module must be named by its path relative to the
//     module root ("topology", "internal/logx"; "." for the root itself);
//   - a package of another module ("github.com/nats-io/nats.go/...") is
//     free unless allowed names some: then it must start with one of them;
//     StdlibOnly forbids them all.
//
// The standard library is always allowed.
func Only(t testing.TB, allowed ...string) {
	t.Helper()
	var mine, external []string
	for _, a := range allowed {
		if a != "." && strings.Contains(strings.SplitN(a, "/", 2)[0], ".") || a == StdlibOnly {
			external = append(external, a)
		} else {
			mine = append(mine, a)
		}
	}
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
			if path == Module {
				path += "/." // the module's root package is named "."
			}
			if rel, ok := strings.CutPrefix(path, Module+"/"); ok {
				if !slices.Contains(mine, rel) {
					t.Errorf("%s imports %s; this package may import only %v of this module", name, rel, mine)
				}
				continue
			}
			std := !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
			if std || len(external) == 0 {
				continue
			}
			if !slices.ContainsFunc(external, func(prefix string) bool { return strings.HasPrefix(path, prefix) }) {
				t.Errorf("%s imports %s; this package may import, outside the standard library and this module, only %v", name, path, external)
			}
		}
	}
}

// StdlibOnly, given to Only, allows no package of another module.
const StdlibOnly = "(standard library only)"
