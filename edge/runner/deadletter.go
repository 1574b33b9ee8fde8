package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/eventid"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.etcd.io/bbolt"

	"github.com/leafline/leafline/sink"
)

// deadLetter publishes a DLQ record for every permanent failure and waits
// for the PubAcks. A dead-lettered event with an event_id gets a
// dead_lettered receipt. A DLQ publish failure holds the message: no ACK,
// no Term.
func (r *Runner) deadLetter(ctx context.Context, items []item) {
	type pending struct {
		i   int
		fut jetstream.PubAckFuture
	}
	var futs []pending
	fail := func(it *item, err error) {
		it.hold = err
		r.metrics.DLQPublishErrors.Inc()
		r.log.Warn("dlq publish failed; message held (no ack, no term)", r.attrs(it, "err", err)...)
	}
	for i := range items {
		it := &items[i]
		if it.err == nil || !sink.IsPermanent(it.err) {
			continue
		}
		// A message dead-lettered before (its marker was committed with
		// its dead_lettered receipt) is not published again, however long
		// after the DLQ stream's duplicate window it comes back.
		done, err := r.dlqRecorded(it)
		if err != nil {
			fail(it, err)
			continue
		}
		if done {
			r.step("dlq_recorded", it)
			r.markDead(it)
			continue
		}
		data, err := r.dlqRecord(it).Encode()
		if err != nil {
			fail(it, fmt.Errorf("encode DLQ record: %w", err))
			continue
		}
		msg := nats.NewMsg(r.cfg.DeadLetter.Subject)
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, r.dlqKey(it))
		r.step("dlq_publish", it)
		f, err := r.js.PublishMsgAsync(msg, jetstream.WithExpectStream(r.cfg.DeadLetter.Stream))
		if err != nil {
			fail(it, fmt.Errorf("DLQ publish: %w", err))
			continue
		}
		futs = append(futs, pending{i, f})
	}
	if len(futs) == 0 {
		return
	}
	timeout := time.NewTimer(r.cfg.Outbox.PublishTimeout.D())
	defer timeout.Stop()
	for _, p := range futs {
		it := &items[p.i]
		select {
		case <-p.fut.Ok():
			r.step("dlq_puback", it)
			it.newDead = true
			r.markDead(it)
		case err := <-p.fut.Err():
			fail(it, fmt.Errorf("DLQ publish: %w", err))
		case <-timeout.C:
			fail(it, errors.New("DLQ publish: no PubAck before the publish timeout"))
		}
	}
}

// markDead records that it's DLQ record is PubAck'ed: it gets a
// dead_lettered receipt when it has an event_id.
func (r *Runner) markDead(it *item) {
	it.dead = true
	it.hasRec = false
	if it.ev.ID == "" {
		return
	}
	rec, err := r.digestReceiptRecord(it.ev.ID, it.ev.Subject, receipt.StatusDeadLettered, errorType(it.err), it.digest)
	if err != nil {
		it.hold = err
		return
	}
	it.rec, it.hasRec = rec, true
}

// dlqMarkers is the bbolt bucket of DLQ record keys already PubAck'ed,
// committed in the same transaction as the batch's receipts.
var dlqMarkers = []byte("edge.dlq")

func (r *Runner) dlqKey(it *item) string {
	return dlqMsgID(r.site, it.meta.Stream, it.meta.Sequence.Stream)
}

func (r *Runner) dlqRecorded(it *item) (bool, error) {
	key := []byte(r.dlqKey(it))
	found := false
	err := r.ob.DB().View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket(dlqMarkers); b != nil {
			found = b.Get(key) != nil
		}
		return nil
	})
	return found, err
}

func (r *Runner) dlqRecord(it *item) DLQRecord {
	dl := r.cfg.DeadLetter
	rec := DLQRecord{
		Version:        DLQVersion,
		Site:           r.site,
		Subject:        it.msg.Subject(),
		Stream:         it.meta.Stream,
		Consumer:       it.meta.Consumer,
		StreamSeq:      it.meta.Sequence.Stream,
		ConsumerSeq:    it.meta.Sequence.Consumer,
		EventID:        it.ev.ID,
		Delivered:      it.meta.NumDelivered,
		ErrorType:      errorType(it.err),
		DeadLetteredAt: time.Now().UTC(),
	}
	if rec.EventID == "" {
		rec.EventIDError = "no usable event_id"
		if errors.Is(it.err, eventid.ErrNoEventID) {
			rec.EventIDError = it.err.Error()
		}
	}
	if dl.IncludeError {
		rec.Error = it.err.Error()
	}
	if dl.IncludeHeaders {
		rec.Headers = it.msg.Headers()
	}
	if dl.IncludePayload {
		rec.Payload = it.msg.Data()
	}
	return rec
}

// logDeadLetter logs a dead-lettered message: at WARN the delivery whose
// DLQ record was PubAck'ed, at INFO a redelivery of a message dead-lettered
// before (its record is not published again). The line carries the
// event_id (empty when the message has none, with event_id_error saying
// why), the error type and the DLQ subject; never the payload or headers.
func (r *Runner) logDeadLetter(it *item) {
	attrs := r.attrs(it, "error_type", errorType(it.err), "dlq_subject", r.cfg.DeadLetter.Subject,
		"term", r.cfg.DeadLetter.AckTermAfterPub)
	if it.ev.ID == "" && errors.Is(it.err, eventid.ErrNoEventID) {
		attrs = append(attrs, "event_id_error", it.err.Error())
	}
	if !it.newDead {
		r.log.Info("dlq: already dead-lettered by an earlier delivery", attrs...)
		return
	}
	r.log.Warn("dlq: dead-lettered", attrs...)
}
