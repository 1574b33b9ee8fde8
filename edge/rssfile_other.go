//go:build !linux

package edge

// residentFileBytes is unknown on this platform (the outbox's
// ReleaseMapped is a no-op there too).
func residentFileBytes() (int64, bool) { return 0, false }
