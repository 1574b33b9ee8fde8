package edge

import (
	"errors"
	"fmt"

	"github.com/leafline/leafline/sink"
)

// ErrNoEventID means a message carries no usable event_id. It is permanent.
var ErrNoEventID = fmt.Errorf("%w: no usable event_id", sink.ErrPermanent)

// ErrOversize means a message is larger than delivery.max_message_bytes. It
// is permanent.
var ErrOversize = fmt.Errorf("%w: message too large", sink.ErrPermanent)

// ErrFatal marks an error after which the box must stop (a bbolt commit
// error): state is not retried in place; the supervisor restarts the box.
var ErrFatal = errors.New("fatal")
