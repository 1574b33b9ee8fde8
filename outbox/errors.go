package outbox

import "errors"

// Sentinel errors. Every error the package returns that matches one of these
// wraps it with detail (the file path, the record, the operation); match them
// with errors.Is.
var (
	// ErrClosed is returned by every method called after Close, including a
	// second Close.
	ErrClosed = errors.New("outbox closed")

	// ErrCorrupt means the outbox file failed a structural or invariant check,
	// or bbolt panicked while reading it. The message names the file and says
	// what to do. The file is never repaired or replaced automatically.
	ErrCorrupt = errors.New("outbox file is corrupt")

	// ErrSchema means the file carries a schema version this build does not
	// know (typically a newer leafline wrote it).
	ErrSchema = errors.New("unknown outbox schema version")

	// ErrInvalidRecord is returned by Commit, before anything is stored, when a
	// record has an empty Key or Subject, a Key longer than MaxKeyLen bytes or
	// Data longer than MaxDataLen bytes.
	ErrInvalidRecord = errors.New("invalid outbox record")

	// ErrFull is returned by a write that would grow the file beyond
	// Options.MaxSize. The write changed nothing; like every failed write
	// it is fatal (see Caveats), and a Prune after a restart frees pages
	// for new records.
	ErrFull = errors.New("outbox file is full")
)

// corruptAdvice is appended to every ErrCorrupt raised while opening or
// checking a file: it is what the operator reads in the log.
const corruptAdvice = "stop leafline, move the file aside (keep it for analysis) and restore it from backup; " +
	"leafline will not start on an empty or rolled-back outbox silently"
