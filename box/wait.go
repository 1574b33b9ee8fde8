package box

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/jsmsg"
)

// A box waits for what it depends on instead of exiting: a cluster still
// starting, a stream whose leader is being elected after a node died, a
// server restarting. Such a failure is transient (see transientJS); the
// box tries again, pausing up to waitMax, not ready meanwhile with the
// reason, and warns once the wait has lasted longer than a normal start
// (waitWarnAfter). Errors that waiting cannot fix (a bad config, settings
// that conflict with an existing stream, refused credentials) end the
// start at once.

const (
	// waitTry bounds one attempt.
	waitTry = 30 * time.Second
	// waitMax is the longest pause between two attempts.
	waitMax = 5 * time.Second
	// waitWarnAfter is how long a start normally takes at most.
	waitWarnAfter = 15 * time.Second
)

// transientJS reports whether a JetStream call failed in a way that
// passes by itself (jsmsg.Transient), or met the box's connection between
// two servers.
func transientJS(err error) bool {
	return jsmsg.Transient(err) || errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
}

// Wait runs f until it succeeds, fails with an error that is not
// transient, or ctx is done; each attempt gets its own deadline. what
// names the wait in /readyz and the log.
func (a *App) Wait(ctx context.Context, what string, f func(ctx context.Context) error) error {
	start := time.Now()
	warned := false
	for pause := 250 * time.Millisecond; ; pause = min(2*pause, waitMax) {
		tctx, cancel := context.WithTimeout(ctx, waitTry)
		err := f(tctx)
		cancel()
		if err == nil {
			if warned {
				a.log.Info("waited: "+what, "after", time.Since(start).Round(time.Second))
			}
			return nil
		}
		if ctx.Err() != nil || !transientJS(err) {
			return err
		}
		a.notReady.Store(fmt.Sprintf("waiting for %s: %v", what, err))
		if !warned && time.Since(start) > waitWarnAfter {
			warned = true
			a.log.Warn("still waiting for "+what+"; trying again", "for", time.Since(start).Round(time.Second), "err", err)
		}
		if !ctxsleep.For(ctx, pause) {
			return err
		}
	}
}
