package receipts

import (
	"errors"
	"fmt"
)

// Errors returned by this package. They are wrapped with detail; match them
// with errors.Is.
//
// Errors that mean "this receipt can never be applied as it is; park it in
// quarantine" also match ErrQuarantine, so a caller can decide between
// quarantine and retry without knowing every sentinel:
//
//	if errors.Is(err, receipts.ErrQuarantine) { /* quarantine, then ACK */ } else { /* NAK, retry later */ }
var (
	// ErrQuarantine is matched (via errors.Is) by every error that is
	// permanent for the receipt at hand: ErrMalformed, ErrInvalid,
	// ErrRejected, ErrSubjectMismatch, ErrProcessorNotSite, ErrNotExpected
	// and ErrCorruptRecord. It is never returned on its own.
	ErrQuarantine = errors.New("receipts: quarantine")

	// ErrMalformed means the bytes are not a well-formed receipt: over the
	// size limit, not UTF-8, not a single JSON object, unknown or duplicate
	// keys, wrong types, missing required fields, trailing data, or a
	// decoded receipt that fails Validate (then ErrInvalid matches too).
	ErrMalformed error = &sentinel{msg: "receipts: malformed receipt", quarantine: true}

	// ErrInvalid means a Receipt value breaks a rule checked by Validate.
	ErrInvalid error = &sentinel{msg: "receipts: invalid receipt", quarantine: true}

	// ErrRejected means ServiceConfig.Accept refused a well-formed receipt
	// (for example an unknown site or processor).
	ErrRejected error = &sentinel{msg: "receipts: receipt rejected", quarantine: true}

	// ErrSubjectMismatch means a receipt arrived on a subject that does not
	// name its own site and status (ServiceConfig.SubjectPrefix): the link
	// it came through does not speak for the site it names.
	ErrSubjectMismatch error = &sentinel{msg: "receipts: receipt disagrees with its subject", quarantine: true}

	// ErrProcessorNotSite means a receipt names a processor other than its
	// site where every site reports only for itself
	// (ServiceConfig.ProcessorIsSite).
	ErrProcessorNotSite error = &sentinel{msg: "receipts: receipt speaks for another processor than its site", quarantine: true}

	// ErrNotExpected means the event's origin is known and the receipt's
	// processor is not one the event was routed to.
	ErrNotExpected error = &sentinel{msg: "receipts: processor was not routed this event", quarantine: true}

	// ErrCorruptRecord means the completion record stored in the KV bucket
	// for an event cannot be decoded or belongs to another event. Nothing is
	// overwritten; the receipt is quarantined so it can be replayed once the
	// record has been repaired.
	ErrCorruptRecord error = &sentinel{msg: "receipts: corrupt completion record", quarantine: true}

	// ErrNotFound means no completion record exists for the event.
	ErrNotFound = errors.New("receipts: not found")

	// ErrTooManyConflicts means Store.Apply lost the compare-and-set race
	// more times than it retries (other writers keep changing the same key).
	// It is transient: retry later.
	ErrTooManyConflicts = errors.New("receipts: too many concurrent updates")

	// ErrInvalidConfig is wrapped by NewService for every configuration problem.
	ErrInvalidConfig = errors.New("receipts: invalid config")

	// ErrIncompatible means an existing stream has a configuration this
	// package cannot use (for example a quarantine stream that does not
	// capture the quarantine subject). Setup does not change it.
	ErrIncompatible = errors.New("receipts: incompatible existing resource")

	// ErrAlreadyRunning is returned by Run when the Service is already running.
	ErrAlreadyRunning = errors.New("receipts: service already running")

	// ErrBadQuery means a status query (List parameters, cursor, request
	// body) is malformed or out of range. The HTTP and micro APIs answer it
	// with 400.
	ErrBadQuery = errors.New("receipts: bad query")

	// ErrNoIndex means the Store was made with NewStore, without the status
	// index that List and Summary read; use OpenStore.
	ErrNoIndex = errors.New("receipts: store has no status index")

	// ErrNotReady means the Service has not opened its buckets yet (Setup
	// or Run has not succeeded). The HTTP and micro APIs answer it with 503.
	ErrNotReady = errors.New("receipts: completion store not ready")

	// ErrIndexIncomplete means the completion record WAS written (the
	// returned outcome is valid) but some status index entries could not be
	// removed. It is transient: redeliver the receipt, and the repeat —
	// counted as a duplicate — finishes the index work. Until then List
	// skips the stale entries and Summary may count them.
	ErrIndexIncomplete = errors.New("receipts: status index update incomplete")
)

// joinInvalid wraps errs in ErrInvalid, or returns nil when errs is empty.
func joinInvalid(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
}

// sentinel is an error value that can also match ErrQuarantine.
type sentinel struct {
	msg        string
	quarantine bool
}

// Error returns the message.
func (e *sentinel) Error() string { return e.msg }

// Is reports whether the error belongs to the quarantine class.
func (e *sentinel) Is(target error) bool { return e.quarantine && target == ErrQuarantine }
