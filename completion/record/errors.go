package record

import (
	"errors"

	"github.com/leafline/leafline/receipt"
)

// Errors returned by this package. They are wrapped with detail; match them
// with errors.Is. ErrCorruptRecord and ErrNotExpected match
// receipt.ErrQuarantine: the receipt at hand is quarantined.
var (
	// ErrCorruptRecord means the completion record stored in the KV bucket
	// for an event cannot be decoded or belongs to another event. Nothing is
	// overwritten; the receipt is quarantined so it can be replayed once the
	// record has been repaired.
	ErrCorruptRecord error = receipt.PermanentError("record: corrupt completion record")

	// ErrNotExpected means the event's origin is known and the receipt's
	// processor is not one the event was routed to.
	ErrNotExpected error = receipt.PermanentError("record: processor was not routed this event")

	// ErrNotFound means no completion record exists for the event.
	ErrNotFound = errors.New("record: not found")

	// ErrTooManyConflicts means Store.Apply lost the compare-and-set race
	// more times than it retries (other writers keep changing the same key).
	// It is transient: retry later.
	ErrTooManyConflicts = errors.New("record: too many concurrent updates")

	// ErrBadQuery means a status query (List parameters, cursor, request
	// body) is malformed or out of range. The HTTP and micro APIs answer it
	// with 400.
	ErrBadQuery = errors.New("record: bad query")

	// ErrNotReady means the Service has not opened its buckets yet (Setup
	// or Run has not succeeded). The HTTP and micro APIs answer it with 503.
	ErrNotReady = errors.New("record: completion store not ready")

	// ErrInvalidConfig is wrapped by NewService for every configuration problem.
	ErrInvalidConfig = errors.New("record: invalid config")

	// ErrIncompatible means an existing stream has a configuration this
	// package cannot use (for example a quarantine stream that does not
	// capture the quarantine subject). Setup does not change it.
	ErrIncompatible = errors.New("record: incompatible existing resource")
)
