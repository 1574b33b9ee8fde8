package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/leafline/leafline/internal/failpoint"
	"github.com/leafline/leafline/outbox"
)

// FirstPublisher is a publisher told which receipts it publishes for the
// first time: first[i] says recs[i] was stored by the commit of the batch
// that publishes it. It may bundle those (see receipt.EncodeBundle); a
// receipt published before may be in the receipts stream already and is
// best published alone, under its own Nats-Msg-Id, where a copy inside the
// stream's duplicate window is dropped.
type FirstPublisher interface {
	PublishFirst(ctx context.Context, recs []outbox.Record, first []bool) error
}

// publishBatch publishes b's pending receipts and waits for every PubAck
// (step 5). On a publish failure the items with receipts are held (no
// ACK); the relay retries the receipts.
func (r *Runner) publishBatch(ctx context.Context, b *batch, pub outbox.Publisher) {
	items, pending := b.items, b.pending
	for _, i := range b.publishing {
		r.step("receipt_publish", &items[i])
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Outbox.PublishTimeout.D())
	start := time.Now()
	var err error
	if fp, ok := pub.(FirstPublisher); ok {
		err = fp.PublishFirst(pctx, pending, b.first)
	} else {
		err = pub.Publish(pctx, pending)
	}
	cancel()
	failpoint.Inject(failpoint.EdgeBeforePubAck)
	r.metrics.PubAckSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		r.metrics.ReceiptPublishErrors.Inc()
		b.acked = outbox.PartiallyPublished(pending, err)
		r.log.Warn("receipt publish failed; messages stay unacked, relay retries", "receipts", len(pending), "pubacked", len(b.acked), "err", err)
		for _, i := range b.withRec {
			items[i].hold = err
		}
		return
	}
	b.published = true
	b.times.PubAck = time.Now()
	for _, i := range b.publishing {
		r.step("receipt_puback", &items[i])
	}
	failpoint.Inject(failpoint.EdgeAfterPubAck)
	r.metrics.ReceiptsPublished.Add(float64(len(pending)))
}

// markAndFinish marks the PubAck'ed receipts of bs published, in one
// transaction, then sends each batch's final acknowledgements (step 6).
// Only an outbox error is returned: it is fatal, and no batch of bs is
// then finished.
func (r *Runner) markAndFinish(ctx context.Context, bs []*batch) error {
	if err := r.mark(publishedRecs(bs)); err != nil {
		return err
	}
	r.finishMarked(ctx, bs)
	return nil
}

// publishedRecs are the receipts bs PubAck'ed (of a held batch, those a
// failed publish PubAck'ed all the same).
func publishedRecs(bs []*batch) []outbox.Record {
	var recs []outbox.Record
	for _, b := range bs {
		if b.published {
			recs = append(recs, b.pending...)
		} else {
			recs = append(recs, b.acked...)
		}
	}
	return recs
}

// mark marks recs published in a transaction of its own (an error is
// fatal).
func (r *Runner) mark(recs []outbox.Record) error {
	if len(recs) == 0 {
		return nil
	}
	_, err := r.ob.CommitMark(nil, recs, nil)
	r.signalWrote()
	if err != nil {
		return fmt.Errorf("%w: outbox mark published: %w", ErrFatal, err)
	}
	failpoint.Inject(failpoint.EdgeAfterMark)
	return nil
}

// signalWrote tells r.wrote, if anyone listens, that an outbox
// transaction ended.
func (r *Runner) signalWrote() {
	select {
	case r.wrote <- struct{}{}:
	default:
	}
}

// finishMarked sends the final acknowledgements of bs, whose PubAck'ed
// receipts are marked published.
func (r *Runner) finishMarked(ctx context.Context, bs []*batch) {
	now := time.Now()
	for _, b := range bs {
		if b.published {
			b.times.Marked = now
		}
		r.finishBatch(ctx, b)
	}
}
