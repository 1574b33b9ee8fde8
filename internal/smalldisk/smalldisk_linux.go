// Package smalldisk gives a test a real filesystem of a fixed, small size:
// a size-limited tmpfs. Mounting one needs root; without it, or where the
// mount fails (a container without the capability), the test is skipped
// with a message saying why.
package smalldisk

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of mib MiB at dir, an existing directory, for the
// rest of t, or skips t.
func Mount(t testing.TB, dir string, mib int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: this test needs root to mount a size-limited tmpfs")
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm", mib)); err != nil {
		t.Skipf("skipping: cannot mount a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}
