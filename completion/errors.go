package completion

import (
	"errors"

	"github.com/leafline/leafline/receipt"
)

// Errors returned by this package. They are wrapped with detail; match them
// with errors.Is. ErrRejected, ErrSubjectMismatch and ErrProcessorNotSite match
// receipt.ErrQuarantine: the receipt at hand is quarantined.
var (
	// ErrRejected means ServiceConfig.Accept refused a well-formed receipt
	// (for example an unknown site or processor).
	ErrRejected error = receipt.PermanentError("completion: receipt rejected")

	// ErrSubjectMismatch means a receipt arrived on a subject that does not
	// name its own site and status (ServiceConfig.SubjectPrefix): the link
	// it came through does not speak for the site it names.
	ErrSubjectMismatch error = receipt.PermanentError("completion: receipt disagrees with its subject")

	// ErrProcessorNotSite means a receipt names a processor other than its
	// site where every site reports only for itself
	// (ServiceConfig.ProcessorIsSite).
	ErrProcessorNotSite error = receipt.PermanentError("completion: receipt speaks for another processor than its site")

	// ErrAlreadyRunning is returned by Run when the Service is already running.
	ErrAlreadyRunning = errors.New("completion: service already running")
)
