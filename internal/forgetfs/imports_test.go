package forgetfs

import (
	"testing"

	"github.com/leafline/leafline/internal/importcheck"
)

// TestImports: a leaf of the test helpers: nothing of this module, and of
// other modules only go-fuse and x/sys.
func TestImports(t *testing.T) {
	importcheck.Only(t, "github.com/hanwen/go-fuse/v2", "golang.org/x/sys")
}
