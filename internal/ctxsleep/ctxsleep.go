// Package ctxsleep waits for a duration or a context, whichever ends first:
// the one way every loop of the box pauses, so that a cancelled context
// stops it at once.
package ctxsleep

import (
	"context"
	"errors"
	"fmt"
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

// Until calls cond every 10ms until it reports true, ctx is done or d has
// passed; it returns nil on true, ctx's error, or an error after d that
// wraps cond's last error.
func Until(ctx context.Context, d time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("condition not met")
			}
			return fmt.Errorf("after %v: %w", d, err)
		}
		if !For(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}
