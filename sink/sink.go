package sink

import (
	"context"

	"go.etcd.io/bbolt"
)

// Event is one message handed to a sink.
type Event struct {
	// ID is the event_id: the only identity that survives every hop. A
	// target absorbs a redelivery by it.
	ID      string
	Subject string
	// OriginStream is the stream at L1 the event was first published to.
	OriginStream string
	Data         []byte
	// StreamSeq is the message's sequence in the edge stream. It differs at
	// every hop and is for logs only, never identity.
	StreamSeq uint64
}

// Sink durably writes events, idempotently by Event.ID: writing an event
// that is already written succeeds without a second record. It returns one
// error per event, in the order of evs (nil for success); a result slice
// of another length fails the whole batch temporarily. An error wrapped
// with Permanent sends that event to the dead-letter path; any other error
// is temporary and the event is redelivered later (after RetryAfter's delay
// when the error carries one). Write must not return before the successful
// writes are durable, and must return once ctx is done.
//
// Write may be called again with events it has already written, after a
// crash or a lost ACK: that is a redelivery, and it must succeed without a
// second record.
type Sink interface {
	Write(ctx context.Context, evs []Event) []error
}

// TxSink is a sink whose writes share the outbox's bbolt transaction, so the
// business records and their receipts commit together or not at all (a true
// transactional outbox). An error rolls the whole batch back: every event
// of it fails temporarily. WriteTx must not commit, roll back, or keep tx,
// and must skip events already stored (a redelivery).
type TxSink interface {
	WriteTx(tx *bbolt.Tx, evs []Event) error
}
