package record

import (
	"time"

	"github.com/leafline/leafline/receipt"
)

// OriginResult is what ApplyOriginBatch did with one Origin: what
// ApplyOrigin would have returned for it.
type OriginResult struct {
	Outcome OriginOutcome
	Err     error
	// Held is what the merge did with the receipts held for the event.
	Held HeldRelease
}

// BatchItem is one receipt of Store.ApplyBatch and the time L1 received it.
type BatchItem struct {
	Receipt    receipt.Receipt
	ReceivedAt time.Time
}

// BatchResult is what ApplyBatch did with one BatchItem: the same Outcome
// and error ApplyOutcome would have returned for it, and the event's origin
// sequence as the record knows it.
type BatchResult struct {
	Outcome   Outcome
	OriginSeq uint64
	Err       error
}
