package box

import (
	"errors"
	"fmt"

	"golang.org/x/sys/windows"
)

// isNoSpace reports whether err is the volume's "disk full" (a write or a
// file extension that did not fit) or "quota exceeded".
func isNoSpace(err error) bool {
	return errors.Is(err, windows.ERROR_DISK_FULL) || errors.Is(err, windows.ERROR_HANDLE_DISK_FULL) ||
		errors.Is(err, windows.ERROR_DISK_QUOTA_EXCEEDED)
}

// diskSpace returns the bytes available to the box's user (quotas
// applied) on the volume holding dir, and its size.
func diskSpace(dir string) (free, total uint64, err error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("disk space of %s: %w", dir, err)
	}
	if err := windows.GetDiskFreeSpaceEx(p, &free, &total, nil); err != nil {
		return 0, 0, fmt.Errorf("GetDiskFreeSpaceEx %s: %w", dir, err)
	}
	return free, total, nil
}
