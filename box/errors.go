package box

import "errors"

// ErrStorageLimits means that the byte limits of the streams the box
// creates add up to more than nats-server allows its store on this disk
// (storage_limits.go). The error says the free space found, the limits,
// and the setting to lower. A start that fails with it is fatal: the box
// does not wait, as it does on a full disk, for space that a smaller
// limit would not need.
var ErrStorageLimits = errors.New("the streams' storage limits do not fit this box's disk")
