package state

import "errors"

var (
	// ErrInvalidConfig wraps every problem Config.Validate finds.
	ErrInvalidConfig = errors.New("invalid completion state config")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("completion state closed")
	// ErrBadFile is a local state file that is not one (or of a newer
	// layout): Open moves it aside and rebuilds it from the log.
	ErrBadFile = errors.New("not a completion state file")
	// ErrBadEntry is a log entry that cannot be folded: the follower stops
	// (the state stays at the entry before it) rather than skip it.
	ErrBadEntry = errors.New("bad completion log entry")
)
