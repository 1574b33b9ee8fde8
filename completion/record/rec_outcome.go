package record

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leafline/leafline/receipt"
)

// Outcome says what Apply did with a receipt.
type Outcome int

// String returns "applied", "duplicate", "conflict" or "held".
func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Conflict:
		return "conflict"
	case Held:
		return "held"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// merge folds r into c and reports the outcome. Pure; no I/O.
func merge(c *Completion, r receipt.Receipt, receivedAt time.Time) Outcome {
	c.UpdatedAt = receivedAt.UTC()
	pr, ok := c.Processors[r.Processor]
	switch {
	case !ok:
		c.Processors[r.Processor] = processorRecord(r, receivedAt)
		return Applied
	case pr.Status == r.Status:
		pr.Duplicates++
		c.Processors[r.Processor] = pr
		return Duplicate
	case pr.Status == StatusRetired:
		// Sent before its site was retired: what it says replaces the
		// retirement.
		c.Processors[r.Processor] = processorRecord(r, receivedAt)
		return Applied
	default:
		pr.Conflicts++
		c.Processors[r.Processor] = pr
		return Conflict
	}
}

// processorRecord is what r, received at L1 at receivedAt, records.
func processorRecord(r receipt.Receipt, receivedAt time.Time) ProcessorRecord {
	return ProcessorRecord{Status: r.Status, Site: r.Site, ReceiptID: r.ReceiptID, ProcessedAt: r.ProcessedAt.UTC(),
		ReceivedAt: receivedAt.UTC(), Reason: r.Reason, Verified: r.Verified}
}

// MaxAll bounds the number of records All returns.
const MaxAll = 100_000

func DecodeCompletion(b []byte) (Completion, error) {
	var c Completion
	if err := json.Unmarshal(b, &c); err != nil {
		return Completion{}, fmt.Errorf("%w: %v", ErrCorruptRecord, err)
	}
	if c.Processors == nil {
		return Completion{}, fmt.Errorf("%w: no processors", ErrCorruptRecord)
	}
	c.Derive()
	return c, nil
}

// Outcomes of Store.ApplyOutcome.
const (
	// Applied: first terminal status for (event_id, processor); recorded.
	Applied Outcome = iota + 1
	// Duplicate: same status as the recorded one; Duplicates incremented.
	Duplicate
	// Conflict: a different status than the recorded one; Conflicts
	// incremented, the recorded status kept.
	Conflict
	// Held: the event's origin is unknown and the Store holds receipts
	// until it is seen (StoreConfig.HoldUntilOrigin): the receipt was
	// recorded in Completion.Held, where it counts for nothing yet. A
	// repeat of a held receipt is a Duplicate (or Conflict) as usual.
	Held
)
