//go:build linux

package outbox

import (
	"fmt"
	"syscall"

	"go.etcd.io/bbolt"
)

// ReleaseMapped drops this process's mapping of the file's pages. bbolt
// reads the file through a read-only shared memory map, and every page a
// transaction touched stays resident in the process: with random keys that
// is, after a while, the whole file. madvise(MADV_DONTNEED) unmaps them;
// the data stays in the kernel's page cache (or on disk), and the next
// read maps the page again with a minor fault. Writes are unaffected: bbolt
// writes with pwrite, never through the map.
//
// It runs inside a read transaction, which holds bbolt's remap lock, so
// the map cannot move or shrink meanwhile. Call it after writes and
// periodically (the edge does after each of its runner's transactions and
// every second); it is a no-op where madvise is not available.
func (o *Outbox) ReleaseMapped() error {
	if err := o.usable(); err != nil {
		return err
	}
	err := o.db.View(func(tx *bbolt.Tx) error {
		addr, size := tx.DB().Info().Data, uintptr(tx.Size())
		if addr == 0 || size == 0 {
			return nil
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, addr, size, syscall.MADV_DONTNEED); errno != 0 {
			return errno
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: release mapped pages: %w", err)
	}
	return nil
}
