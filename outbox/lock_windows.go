package outbox

import (
	"errors"
	"fmt"
	"os"
	"time"

	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/windows"
)

// lockOffset is the byte Open locks on Windows, 2^64-2: the one below the
// byte bbolt locks (the last addressable one). Windows locks are byte
// ranges held per handle, and the same handle cannot take an exclusive
// lock on a range it already holds, so Open cannot take bbolt's own lock
// first as it does on Unix; every leafline process takes this one before
// bbolt's. Both lie far past the end of the data, so reads and writes of
// the file are not affected.
var lockOffset = windows.Overlapped{Offset: 1<<32 - 2, OffsetHigh: 1<<32 - 1}

// lockFile takes leafline's exclusive lock on f before Open reads the file,
// so that no other leafline process writes it while it is validated. It is
// held until f is closed.
func lockFile(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ol := lockOffset
		err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
		if err == nil {
			return nil
		}
		if !errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return fmt.Errorf("lock: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("file is locked by another process (waited %s): %w", timeout, berrors.ErrTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unlockFile releases the lock; closing the handle releases it too.
func unlockFile(f *os.File) {
	ol := lockOffset
	_ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &ol)
}
