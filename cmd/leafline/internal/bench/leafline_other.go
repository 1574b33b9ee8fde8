//go:build !linux

package bench

import (
	"context"
	"errors"
)

// Leafline runs the phases of o on this machine. It needs Linux: it reads
// the process's memory and CPU time and the disk's flush count from /proc
// and /sys.
func Leafline(ctx context.Context, o Options) ([]Figure, error) {
	return nil, errors.New("bench: the leafline phases run on Linux only (they read /proc and /sys); `leafline bench --only sinks` runs elsewhere")
}
