package edge

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/leafline/leafline/outbox"
)

// Open opens the edge's outbox before anything else of the box
// starts. The outbox file's lock is the data dir's: a second box started
// on the same data dir stops here, naming the file, before it starts an
// embedded server on the first box's JetStream store.
func (a *Role) Open() error {
	if err := os.MkdirAll(a.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	ob, err := outbox.Open(filepath.Join(a.cfg.DataDir, "outbox.db"), outbox.Options{})
	if err != nil {
		return err
	}
	a.ob = ob
	return nil
}
