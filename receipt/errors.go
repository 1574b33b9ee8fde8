package receipt

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
//	if errors.Is(err, receipt.ErrQuarantine) { /* quarantine, then ACK */ } else { /* NAK, retry later */ }
var (
	// ErrQuarantine is matched (via errors.Is) by every error that is
	// permanent for the receipt at hand: ErrMalformed, ErrInvalid,
	// and every error made with PermanentError (L1's
	// refusals). It is never returned on its own.
	ErrQuarantine = errors.New("receipt: quarantine")

	// ErrMalformed means the bytes are not a well-formed receipt: over the
	// size limit, not UTF-8, not a single JSON object, unknown or duplicate
	// keys, wrong types, missing required fields, trailing data, or a
	// decoded receipt that fails Validate (then ErrInvalid matches too).
	ErrMalformed error = &sentinel{msg: "receipt: malformed receipt", quarantine: true}

	// ErrInvalid means a Receipt value breaks a rule checked by Validate.
	ErrInvalid error = &sentinel{msg: "receipt: invalid receipt", quarantine: true}
)

// joinInvalid wraps errs in ErrInvalid, or returns nil when errs is empty.
func Invalid(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
}

// PermanentError returns a sentinel error with message msg that also
// matches ErrQuarantine: the class of errors that are permanent for the
// receipt at hand.
func PermanentError(msg string) error { return &sentinel{msg: msg, quarantine: true} }

// sentinel is an error value that can also match ErrQuarantine.
type sentinel struct {
	msg        string
	quarantine bool
}

// Error returns the message.
func (e *sentinel) Error() string { return e.msg }

// Is reports whether the error belongs to the quarantine class.
func (e *sentinel) Is(target error) bool { return e.quarantine && target == ErrQuarantine }
