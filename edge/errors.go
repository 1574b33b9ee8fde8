package edge

import (
	"errors"
	"fmt"
)

// ErrPermanent marks a failure that redelivery cannot fix (a missing
// event_id, an undecodable or oversize message, a sink's refusal). The
// runner never retries it: it takes the dead-letter path, or, with no DLQ,
// leaves the message unacked and counts it.
var ErrPermanent = errors.New("permanent failure")

// ErrNoEventID means a message carries no usable event_id.
var ErrNoEventID = fmt.Errorf("%w: no usable event_id", ErrPermanent)

// ErrOversize means a message is larger than delivery.max_message_bytes.
var ErrOversize = fmt.Errorf("%w: message too large", ErrPermanent)

// ErrFatal marks an error after which the box must stop (a bbolt commit
// error): state is not retried in place; the supervisor restarts the box.
var ErrFatal = errors.New("fatal")

// Permanent wraps err so that IsPermanent reports true for it.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// IsPermanent reports whether err must not be retried.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }
