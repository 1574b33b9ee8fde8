package edge

import (
	"errors"

	"github.com/leafline/leafline/edge/eventid"
	"github.com/leafline/leafline/edge/runner"
)

// ErrNoEventID means a message carries no usable event_id. It is permanent.
var ErrNoEventID = eventid.ErrNoEventID

// ErrOversize means a message is larger than delivery.max_message_bytes. It
// is permanent.
var ErrOversize = runner.ErrOversize

// ErrFatal marks an error after which the box must stop (a bbolt commit
// error): state is not retried in place; the supervisor restarts the box.
var ErrFatal = runner.ErrFatal

// ErrStorageLimits means that the byte limits of the streams the box
// creates add up to more than nats-server allows its store on this disk
// (storage_limits.go). The error says the free space found, the limits,
// and the setting to lower. A start that fails with it is fatal: the box
// does not wait, as it does on a full disk, for space that a smaller
// limit would not need.
var ErrStorageLimits = errors.New("the streams' storage limits do not fit this box's disk")
