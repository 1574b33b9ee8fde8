package kvstore

import (
	"errors"
)

// Errors returned by this package. They are wrapped with detail; match them
// with errors.Is.
var (
	// ErrNoIndex means the Store was made with NewStore, without the status
	// index that List and Summary read; use OpenStore.
	ErrNoIndex = errors.New("kvstore: store has no status index")

	// ErrIndexIncomplete means the completion record WAS written (the
	// returned outcome is valid) but some status index entries could not be
	// removed. It is transient: redeliver the receipt, and the repeat —
	// counted as a duplicate — finishes the index work. Until then List
	// skips the stale entries and Summary may count them.
	ErrIndexIncomplete = errors.New("kvstore: status index update incomplete")
)
