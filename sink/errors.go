package sink

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrPermanent marks a failure that redelivery cannot fix (a missing
// event_id, an undecodable or oversize message, a target's refusal). The
// runner never retries it: it takes the dead-letter path, or, with no DLQ,
// leaves the message unacked and counts it.
var ErrPermanent = errors.New("permanent failure")

// ErrUnavailable means the target could not be reached or did not answer
// in time. It is temporary.
var ErrUnavailable = errors.New("target unavailable")

// ErrWorkerCrash marks a poison event: one that was in flight at
// PoisonAfter crashes of its target in a row (an exec worker that exited,
// an http target that reset the connection; see the package
// documentation). It wraps ErrPermanent: the runner dead-letters the
// event, with the error type worker_crash.
var ErrWorkerCrash = fmt.Errorf("%w: worker crash", ErrPermanent)

// Permanent wraps err so that IsPermanent reports true for it.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// IsPermanent reports whether err must not be retried.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// retryAfter is a temporary failure whose target asked for a delay.
type retryAfter struct {
	err   error
	delay time.Duration
}

func (e *retryAfter) Error() string { return fmt.Sprintf("%v (retry after %v)", e.err, e.delay) }
func (e *retryAfter) Unwrap() error { return e.err }

// RetryAfter wraps a temporary err with the delay the target asked for
// (an HTTP Retry-After, say). A permanent err is returned unchanged.
func RetryAfter(err error, delay time.Duration) error {
	if err == nil || IsPermanent(err) || delay <= 0 {
		return err
	}
	return &retryAfter{err: err, delay: delay}
}

// RetryDelay returns the delay err asks for, or zero.
func RetryDelay(err error) time.Duration {
	var ra *retryAfter
	if errors.As(err, &ra) {
		return ra.delay
	}
	return 0
}

// outcome names err's class for a log line, without its text (which may
// carry what the target wrote).
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case IsPermanent(err):
		return "fail"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrMalformed):
		return "malformed"
	default:
		return "retry"
	}
}
