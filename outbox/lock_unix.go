//go:build unix

package outbox

import (
	"fmt"
	"os"
	"syscall"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// lockFile takes the same exclusive flock bbolt takes, before Open reads
// the file, so that no other process writes it while it is validated.
// bbolt then locks the same open file description again, which succeeds.
func lockFile(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != syscall.EWOULDBLOCK {
			return fmt.Errorf("lock: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("file is locked by another process (waited %s): %w", timeout, berrors.ErrTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unlockFile releases the lock explicitly: closing the descriptor is not
// enough while a memory mapping of the file still exists.
func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
