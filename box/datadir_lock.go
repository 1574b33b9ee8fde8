package box

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// dataDirLockName is the file in a box's data dir that the running box
// holds locked.
const dataDirLockName = "leafline.lock"

// errDataDirInUse means another box holds the data dir.
var errDataDirInUse = errors.New("in use by another leafline box")

// lockDataDir takes the box's exclusive lock on its data dir, creating the
// dir if needed, so that a second box started on the same data dir (any
// role) stops before it starts a server on the first box's JetStream
// store. The lock is held until release, or until the process ends.
func lockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	path := filepath.Join(dir, dataDirLockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		if errors.Is(err, errDataDirInUse) {
			return nil, fmt.Errorf("data_dir %s is %w (%s is locked)", dir, errDataDirInUse, path)
		}
		return nil, fmt.Errorf("data_dir: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
