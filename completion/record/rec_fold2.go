package record

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leafline/leafline/receipt"
)

// checkExpected refuses r when c knows its origin and r's processor is not
// one the event was routed to.
func checkExpected(c *Completion, r receipt.Receipt) error {
	if !c.OriginKnown() || slices.Contains(c.Expected, r.Processor) {
		return nil
	}
	exp := "none"
	if len(c.Expected) > 0 {
		exp = strings.Join(c.Expected, ", ")
	}
	return fmt.Errorf("%w: processor %s reported %s for event %s, routed to: %s",
		ErrNotExpected, r.Processor, r.Status, receipt.ShortQuote(c.EventID), exp)
}

// hold folds r into c.Held (the event's origin is unknown) and reports
// the outcome, as merge does for Processors. Pure.
func hold(c *Completion, r receipt.Receipt, receivedAt time.Time) Outcome {
	if c.Held == nil {
		c.Held = map[string]ProcessorRecord{}
	}
	held := Completion{Processors: c.Held}
	out := merge(&held, r, receivedAt)
	c.UpdatedAt = held.UpdatedAt
	if out == Applied {
		out = Held
	}
	return out
}

// releaseHeld moves each held receipt to Processors if its processor is
// expected and has no record yet (an expected processor that already has
// one keeps it: the first status wins), and to Unexpected otherwise. Pure.
func releaseHeld(c *Completion) (released, refused []string) {
	for p, rec := range c.Held {
		switch {
		case !slices.Contains(c.Expected, p):
			if c.Unexpected == nil {
				c.Unexpected = map[string]ProcessorRecord{}
			}
			c.Unexpected[p] = rec
			refused = append(refused, p)
		default:
			if _, ok := c.Processors[p]; !ok {
				c.Processors[p] = rec
				released = append(released, p)
			}
		}
	}
	c.Held = nil
	slices.Sort(released)
	slices.Sort(refused)
	return released, refused
}
