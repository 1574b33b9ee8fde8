package runner

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/eventid"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// decode extracts the event from a message; a bad message gets a permanent error.
func (r *Runner) decode(msg jetstream.Msg) item {
	it := item{msg: msg}
	meta, err := msg.Metadata()
	if err != nil {
		it.err = sink.Permanent(fmt.Errorf("no JetStream metadata: %w", err))
		it.meta = &jetstream.MsgMetadata{}
		return it
	}
	it.meta = meta
	if meta.NumDelivered > 1 {
		r.metrics.Redeliveries.Inc()
	}
	// An event L1 sent again to this edge alone comes on its address
	// (topology.AddressedSubject): the sink, the expiry rules and the
	// receipt's lane see the subject it was published on.
	subject, _ := topology.Unaddressed(r.site, msg.Subject())
	it.ev = sink.Event{Subject: subject, OriginStream: r.cfg.Topology.Events.OriginStream, Data: msg.Data(), StreamSeq: meta.Sequence.Stream}
	// The event_id comes first, so that any later permanent failure (an
	// oversize message) can still be reported to L1 as dead_lettered.
	id, err := r.eventID(msg)
	if err != nil {
		it.err = err
		return it
	}
	// The receipt is built here so that an event_id the receipt format
	// refuses is this message's permanent failure, never a batch's.
	it.digest = receipt.PayloadDigest(msg.Data())
	if it.rec, err = r.digestReceiptRecord(id, subject, receipt.StatusProcessed, "", it.digest); err != nil {
		it.err = fmt.Errorf("%w: %w: %w", sink.ErrPermanent, eventid.ErrNoEventID, err)
		return it
	}
	it.ev.ID, it.hasRec = id, true
	if size := len(msg.Data()); size > r.cfg.Delivery.MaxMessageBytes {
		it.err = fmt.Errorf("%w: %d bytes > %d", ErrOversize, size, r.cfg.Delivery.MaxMessageBytes)
		return it
	}
	rule := r.cfg.Topology.Events.ExpiryFor(subject)
	if it.deadline, it.expires, err = receipt.Deadline(msg.Headers().Get, rule, meta.Timestamp); err != nil {
		it.err = sink.Permanent(err)
	}
	return it
}

// digestReceiptRecord is ReceiptRecord with the payload's digest
// (receipt.PayloadDigest) in the receipt, for the event on subject: the
// receipt of an event of a class the edge takes goes in the class's lane
// (receipt.ClassSubject).
func (r *Runner) digestReceiptRecord(eventID, subject string, status receipt.Status, reason, digest string) (outbox.Record, error) {
	rc := receipt.New(eventID, r.cfg.Topology.Events.OriginStream, r.site, r.site, status, time.Now().UTC())
	rc.Reason, rc.PayloadSHA256 = reason, digest
	data, err := rc.Encode()
	if err != nil {
		return outbox.Record{}, err
	}
	return outbox.Record{
		Key:     rc.MsgID(),
		Subject: receipt.ClassSubject(r.cfg.Topology.ReceiptSubject(r.site, string(rc.Status)), r.receiptClass(subject)),
		Data:    data,
	}, nil
}

// attrs are the log attributes of an item: never the payload or headers.
func (r *Runner) attrs(it *item, extra ...any) []any {
	a := []any{"event_id", it.ev.ID, "stream", it.meta.Stream, "seq", it.meta.Sequence.Stream, "delivered", it.meta.NumDelivered}
	return append(a, extra...)
}

// okItems are the items the sink writes: no failure, not expired.
func okItems(items []item) []int {
	var ok []int
	for i := range items {
		if items[i].err == nil && !items[i].expired {
			ok = append(ok, i)
		}
	}
	return ok
}

func events(items []item, idx []int) []sink.Event {
	evs := make([]sink.Event, len(idx))
	for j, i := range idx {
		evs[j] = items[i].ev
	}
	return evs
}

// redriven reports whether msg is an event L1 published again because it
// was overdue (receipt.RedriveHeader).
func redriven(msg jetstream.Msg) bool {
	return msg != nil && msg.Headers().Get(receipt.RedriveHeader) != ""
}

// noteReuse compares a message's payload with the one its event_id was
// first receipted for. The outbox returns the receipt already stored under
// the receipt's key (a redelivery, a redrive, or the same event_id
// published again after the origin stream's duplicate window); its
// payload_sha256 is the first payload's digest. A different digest means
// the event_id was reused for another payload: the sink (which keys by
// event_id) absorbed it and the first outcome stands, so the edge counts it
// (leafline_event_id_reused_total) and logs it at WARN, without the
// payload. L1 sees the same reuse on its origin stream and marks the event
// a conflict (record.OriginReuse).
func (r *Runner) noteReuse(it *item, stored outbox.Record) {
	if it.digest == "" || bytes.Equal(stored.Data, it.rec.Data) {
		return // this very receipt: stored now
	}
	first, err := receipt.Decode(stored.Data)
	if err != nil || first.PayloadSHA256 == "" || first.PayloadSHA256 == it.digest {
		return
	}
	r.metrics.EventIDReused.Inc()
	r.log.Warn("event_id reused with another payload: handled as a duplicate of the first (its outcome stands); the new message stays in the origin stream",
		r.attrs(it, "payload_sha256", it.digest, "first_payload_sha256", first.PayloadSHA256, "status", string(first.Status))...)
}

// receiptClass is the lane of the receipt of an event on subject: its
// class if the edge takes it (Options.ReceiptClasses), else "" (none).
func (r *Runner) receiptClass(subject string) string {
	if len(r.receiptClasses) == 0 || subject == "" {
		return ""
	}
	if c := r.cfg.Topology.Events.ClassOf(subject); slices.Contains(r.receiptClasses, c) {
		return c
	}
	return ""
}
