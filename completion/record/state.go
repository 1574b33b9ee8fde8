package record

import (
	"context"
	"time"
)

// State is where a Service records completions and answers status
// queries from. Two implement it: *Store keeps one record per event in a
// JetStream KV bucket with a KV status index; package completion keeps
// them in a local file projected from a log stream (what an L1 box runs).
// Both decide every outcome with FoldReceipt and FoldOrigin.
//
// Every method may be called concurrently.
type State interface {
	StatusSource
	// ApplyBatch records receipts as if each were applied in order, and
	// returns one result per item: see Store.ApplyBatch. An item's record
	// is durable once its result carries an Outcome and no error.
	ApplyBatch(ctx context.Context, items []BatchItem) []BatchResult
	// ApplyOriginBatch records origins as if each were applied in order
	// (with the same now), and returns one result per origin.
	ApplyOriginBatch(ctx context.Context, origins []Origin, now time.Time) []OriginResult
	// HeldEvents returns up to limit records of status origin_unknown, the
	// oldest first where the State knows the order.
	HeldEvents(ctx context.Context, limit int) ([]Completion, error)
	// DropHeld removes the record c was read from, if it is still exactly
	// that record (a receipt or the origin arriving meanwhile keeps it), and
	// reports whether it did.
	DropHeld(ctx context.Context, c *Completion) (bool, error)
}

// RecordReader reads one completion record; what the Cleaner needs of a
// State.
type RecordReader interface {
	Get(ctx context.Context, eventID string) (Completion, error)
}
