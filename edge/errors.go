package edge

import (
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/receipt/eventid"
)

// ErrNoEventID means a message carries no usable event_id. The runner
// takes it as a permanent failure.
var ErrNoEventID = eventid.ErrNoEventID

// ErrOversize means a message is larger than delivery.max_message_bytes. It
// is permanent.
var ErrOversize = runner.ErrOversize

// ErrFatal marks an error after which the box must stop (a bbolt commit
// error): state is not retried in place; the supervisor restarts the box.
var ErrFatal = runner.ErrFatal
