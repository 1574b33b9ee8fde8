// Package ctxsleep waits for a duration or a context, whichever ends first:
// the one way every loop of the box pauses, so that a cancelled context
// stops it at once.
package ctxsleep

import (
	"context"
	"time"
)

// For waits d or until ctx is done; it reports whether d elapsed.
func For(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
