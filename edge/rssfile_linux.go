//go:build linux

package edge

import (
	"bytes"
	"os"
	"strconv"
)

// residentFileBytes returns the bytes of file-backed and shared memory
// resident in this process (the "shared" field of /proc/self/statm): the
// pages of the outbox's memory map among them.
func residentFileBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return 0, false
	}
	pages, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}
