package completion_test

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the service records in a State (the KV layout unless told otherwise), and uses helpers only.
func TestImports(t *testing.T) {
	importcheck.Only(t, "internal/ctxsleep", "receipt", "completion/record", "completion/kvstore", "internal/failpoint", "internal/jsmsg", "topology/subjects")
}
