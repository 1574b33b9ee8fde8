package edge

import (
	"bytes"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipts"
)

// noteReuse compares a message's payload with the one its event_id was
// first receipted for. The outbox returns the receipt already stored under
// the receipt's key (a redelivery, a redrive, or the same event_id
// published again after the origin stream's duplicate window); its
// payload_sha256 is the first payload's digest. A different digest means
// the event_id was reused for another payload: the sink (which keys by
// event_id) absorbed it and the first outcome stands, so the edge counts it
// (leafline_event_id_reused_total) and logs it at WARN, without the
// payload. L1 sees the same reuse on its origin stream and marks the event
// a conflict (receipts.OriginReuse).
func (r *runner) noteReuse(it *item, stored outbox.Record) {
	if it.digest == "" || bytes.Equal(stored.Data, it.rec.Data) {
		return // this very receipt: stored now
	}
	first, err := receipts.Decode(stored.Data)
	if err != nil || first.PayloadSHA256 == "" || first.PayloadSHA256 == it.digest {
		return
	}
	r.metrics.eventIDReused.Inc()
	r.log.Warn("event_id reused with another payload: handled as a duplicate of the first (its outcome stands); the new message stays in the origin stream",
		r.attrs(it, "payload_sha256", it.digest, "first_payload_sha256", first.PayloadSHA256, "status", string(first.Status))...)
}
