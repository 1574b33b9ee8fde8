//go:build !linux

package memlimit

// Cgroup reads no control group outside Linux.
func Cgroup() (int64, string) { return 0, "" }
