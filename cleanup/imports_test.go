package cleanup

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: the cleanup reads records and audits its deletes; it knows nothing of the service.
func TestImports(t *testing.T) {
	importcheck.Only(t, "internal/ctxsleep", "receipt", "completion/record", "internal/failpoint", "internal/jsmsg", "topology/subjects")
}
