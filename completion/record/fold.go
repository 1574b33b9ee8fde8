package record

import (
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/leafline/leafline/receipt"
)

// The rules by which a receipt or an origin changes a completion record,
// as pure functions. Every implementation of the completion state (the
// KV-backed Store here, the local state of package completion) decides
// with these and only these, so they cannot disagree on an outcome.

// NewCompletion returns the empty record of eventID, before anything was
// folded into it.
func NewCompletion(eventID string) Completion {
	return Completion{EventID: eventID, Processors: map[string]ProcessorRecord{}}
}

// FoldReceipt folds r, received at L1 at receivedAt, into c and reports the
// outcome: exactly what Store.ApplyOutcome decides for the record it read.
// A receipt from a processor the event was not routed to returns an error
// wrapping ErrNotExpected and leaves c as it was. With holdUnknown, a
// receipt for an event whose origin is unknown is held (Outcome Held).
// Every other outcome changed c (a repeat bumps a counter). Pure.
func (c *Completion) FoldReceipt(r receipt.Receipt, receivedAt time.Time, holdUnknown bool) (Outcome, error) {
	if err := checkExpected(c, r); err != nil {
		return 0, err
	}
	if c.OriginStream == "" {
		c.OriginStream = r.OriginStream
	}
	receivedAt = receivedAt.UTC()
	if holdUnknown && !c.OriginKnown() {
		return hold(c, r, receivedAt), nil
	}
	return merge(c, r, receivedAt), nil
}

// HeldRelease names the processors whose held receipts an origin merge
// released (they were expected: they count from now on) and refused (they
// were not: kept in Completion.Unexpected).
type HeldRelease struct{ Released, Refused []string }

// FoldOrigin folds o, seen at now, into c as Store.ApplyOrigin decides:
// OriginCreated or OriginMerged when the record learnt its origin (c
// changed), OriginReused when a reuse was noted (c changed), OriginKnown
// when nothing changed. Pure.
func (c *Completion) FoldOrigin(o Origin, now time.Time) (OriginOutcome, HeldRelease) {
	existed := len(c.Processors) > 0 || len(c.Held) > 0
	held := slices.Sorted(maps.Keys(c.Held))
	out := mergeOrigin(c, o, now.UTC())
	if out == OriginKnown || out == OriginReused {
		return out, HeldRelease{}
	}
	var hr HeldRelease
	for _, p := range held {
		if _, ok := c.Unexpected[p]; ok {
			hr.Refused = append(hr.Refused, p)
		} else {
			hr.Released = append(hr.Released, p)
		}
	}
	if !existed {
		out = OriginCreated
	}
	return out, hr
}

// LastHeld is when the last of c's held receipts reached L1 (zero when it
// holds none).
func (c *Completion) LastHeld() time.Time {
	var last time.Time
	for _, p := range c.Held {
		if p.ReceivedAt.After(last) {
			last = p.ReceivedAt
		}
	}
	return last
}

// DecodeCompletion decodes a stored record and derives it. A value that is
// not a record wraps ErrCorruptRecord.

// EncodeCompletion encodes c as it is stored: derived, without the
// read-time fields.
func EncodeCompletion(c *Completion) ([]byte, error) {
	c.Derive()
	for _, t := range []time.Time{c.PublishedAt, c.UpdatedAt} {
		if y := t.Year(); y < 0 || y > 9999 {
			return json.Marshal(c) // its error: a time JSON cannot carry
		}
	}
	return appendCompletion(make([]byte, 0, 512), c), nil
}
