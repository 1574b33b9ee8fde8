//go:build !linux

// Package smalldisk gives a test a real filesystem of a fixed, small size:
// a size-limited tmpfs, on Linux only.
package smalldisk

import "testing"

// Mount skips t: a size-limited tmpfs is mounted on Linux only.
func Mount(t testing.TB, dir string, mib int) {
	t.Helper()
	t.Skip("skipping: a size-limited tmpfs is mounted on Linux only")
}
