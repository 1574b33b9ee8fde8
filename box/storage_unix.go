//go:build unix

package box

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// isNoSpace reports whether err is the filesystem's "no space left" or
// "quota exceeded".
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskSpace returns the bytes available to the box (not to root) on the
// filesystem holding dir, and its size.
func diskSpace(dir string) (free, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := uint64(st.Bsize)
	return uint64(st.Bavail) * bs, uint64(st.Blocks) * bs, nil
}
