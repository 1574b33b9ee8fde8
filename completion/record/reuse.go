package record

import (
	"slices"
	"time"
)

// An event_id names one event. JetStream drops a second publication of an
// id only inside the origin stream's duplicate window; after it, the same
// id can be published again with another payload. The edges then absorb it
// as a duplicate (their sinks key by event_id), so without a check the
// second payload would be neither processed nor reported. The origin
// tracker compares each message's PayloadDigest with the record's: a
// different payload under a known event_id is recorded in
// Completion.Reused, makes the event a conflict (listed by
// ?status=conflict, counted in Summary.Conflict) and is logged. A
// redelivery or a redrive carries the same payload and is not a reuse.

// OriginReuse is one origin message that reused an event_id with another
// payload.
type OriginReuse struct {
	Seq           uint64    `json:"seq"`
	Subject       string    `json:"subject"`
	PublishedAt   time.Time `json:"published_at"`
	PayloadSHA256 string    `json:"payload_sha256"`
}

// maxReuses bounds Completion.Reused; beyond it a reuse is not recorded
// (the event is a conflict already).
const maxReuses = 16

// noteReuse records o in c.Reused when it carries another payload than the
// one c was first published with, once per origin sequence; it reports
// whether c changed. Pure.
func noteReuse(c *Completion, o Origin, now time.Time) bool {
	if o.Digest == "" || c.PayloadSHA256 == "" || o.Digest == c.PayloadSHA256 || o.Seq == c.OriginSeq {
		return false
	}
	if len(c.Reused) >= maxReuses || slices.ContainsFunc(c.Reused, func(r OriginReuse) bool { return r.Seq == o.Seq }) {
		return false
	}
	c.Reused = append(c.Reused, OriginReuse{Seq: o.Seq, Subject: o.Subject, PublishedAt: o.PublishedAt.UTC(), PayloadSHA256: o.Digest})
	c.UpdatedAt = now.UTC()
	return true
}
