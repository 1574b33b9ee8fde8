package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/failpoint"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/sink"
)

// commitBatch runs steps 2-4 for b: the sink write, the DLQ path and the
// outbox transaction. On return b.pending holds the receipts b must
// publish. Only an outbox error is returned: it is fatal.
//
// After the sink write it calls takeBack, once, for the batches handed
// back by the publishers, and marks their PubAck'ed receipts published in
// b's outbox transaction (marks first: a receipt of b marked there is not
// published again). It returns them, marked, for their final
// acknowledgements; with an error, unmarked.
func (r *Runner) commitBatch(ctx context.Context, b *batch, permit chan<- struct{}, takeBack func() []*batch) ([]*batch, error) {
	b.times.Commit = time.Now()
	r.writeAndDeadLetter(ctx, b.items)
	// The next batch may be fetched now: while this one commits and
	// publishes. (Not before the sink write: a shutdown during a slow
	// write fetches nothing more.)
	r.permitNext(b, permit)
	back := takeBack()
	marks := publishedRecs(back)

	// One outbox transaction for every receipt of the batch, the DLQ
	// markers and, for a TxSink, the business records; and the marks.
	markers := r.collect(b)
	if len(b.withRec) == 0 && len(markers) == 0 {
		return back, r.mark(marks)
	}
	stored, err := r.commitTx(b, markers, marks)
	var serr sinkTxError
	if errors.As(err, &serr) {
		// The sink refused the batch and rolled the transaction back:
		// nothing of it is committed, every message is held.
		r.log.Warn("transactional sink failed; batch rolled back", "messages", len(b.items), "err", serr.err)
		for i := range b.items {
			if b.items[i].hold == nil {
				b.items[i].hold = serr.err
			}
		}
		b.withRec = nil
		return back, r.mark(marks) // rolled back with the batch
	}
	if err != nil {
		// Nothing of this batch is committed; nothing is ACKed.
		return back, fmt.Errorf("%w: outbox commit: %w", ErrFatal, err)
	}
	if len(marks) > 0 {
		failpoint.Inject(failpoint.EdgeAfterMark)
	}
	b.times.Durable = time.Now()
	r.committed(b, stored)
	failpoint.Inject(failpoint.EdgeAfterOutboxCommit)
	return back, nil
}

// writeAndDeadLetter runs steps 2 and 3: the plain sink's write (a TxSink
// writes inside the outbox transaction) and the DLQ records of the
// permanent failures.
func (r *Runner) writeAndDeadLetter(ctx context.Context, items []item) {
	r.expire(items)
	if r.sink != nil {
		if ok := okItems(items); len(ok) > 0 {
			r.writeSink(ctx, items, ok)
		}
	}
	failpoint.Inject(failpoint.EdgeAfterSinkWrite)
	r.applyMaxDeliver(items)
	if r.cfg.DeadLetter.Enabled {
		r.deadLetter(ctx, items)
	}
}

// collect sets b.withRec to the items whose receipt the outbox commit
// stores, and returns the DLQ markers it commits with them.
func (r *Runner) collect(b *batch) (markers [][]byte) {
	for i := range b.items {
		it := &b.items[i]
		if it.hold != nil {
			continue
		}
		if it.hasRec && (it.err == nil || it.dead) {
			b.withRec = append(b.withRec, i)
		}
		if it.newDead {
			markers = append(markers, []byte(r.dlqKey(it)))
		}
	}
	return markers
}

// commitTx is b's outbox transaction: its receipts, the DLQ markers, a
// TxSink's business records and the marks, together. A TxSink's error
// comes back as a sinkTxError.
func (r *Runner) commitTx(b *batch, markers [][]byte, marks []outbox.Record) ([]outbox.Record, error) {
	recs := make([]outbox.Record, len(b.withRec))
	for j, i := range b.withRec {
		recs[j] = b.items[i].rec
	}
	var evs []sink.Event
	if ok := okItems(b.items); r.txSink != nil && len(ok) > 0 {
		evs = events(b.items, ok)
	}
	fn := func(tx *bbolt.Tx) error {
		if len(markers) > 0 {
			bk, err := tx.CreateBucketIfNotExists(dlqMarkers)
			if err != nil {
				return err
			}
			for _, k := range markers {
				if err := bk.Put(k, []byte{1}); err != nil {
					return err
				}
			}
		}
		if len(evs) > 0 {
			if err := r.txSink.WriteTx(tx, evs); err != nil {
				return sinkTxError{err}
			}
		}
		return nil
	}
	start := time.Now()
	stored, err := r.ob.CommitMark(recs, marks, fn)
	r.signalWrote()
	if len(evs) > 0 {
		r.metrics.SinkSeconds.Observe(time.Since(start).Seconds())
	}
	return stored, err
}

// committed takes the records the outbox stored for b.withRec and sets
// b.pending to the receipts b must publish, each once.
func (r *Runner) committed(b *batch, stored []outbox.Record) {
	items := b.items
	seen := make(map[string]bool, len(b.withRec))
	for j, i := range b.withRec {
		it := &items[i]
		r.noteReuse(it, stored[j])
		// The receipt built for this delivery has a receipt_id of its
		// own: stored byte for byte, it is new in the outbox.
		first := bytes.Equal(stored[j].Data, it.rec.Data)
		it.rec = stored[j]
		if r.txSink != nil && it.err == nil {
			r.step("sink_commit", it)
		}
		r.step("outbox_commit", it)
		// A receipt already published is published again when L1 redrove
		// the event: L1 never got it (a hop lost it), and the copy in the
		// outbox is the only one left. Deterministic Nats-Msg-Id: a copy
		// still inside RE's duplicate window is dropped there.
		republish := it.rec.State == outbox.StatePublished && redriven(it.msg)
		if (it.rec.State == outbox.StatePending || republish) && !seen[it.rec.Key] {
			seen[it.rec.Key] = true
			b.pending = append(b.pending, it.rec)
			b.first = append(b.first, first)
		}
	}
	for _, i := range b.withRec {
		if seen[items[i].rec.Key] {
			b.publishing = append(b.publishing, i)
		}
	}
}

// writeSink writes the items through the plain Sink, retrying temporary
// failures in place up to delivery.retry.max_retries times with backoff.
func (r *Runner) writeSink(ctx context.Context, items []item, idx []int) {
	for attempt := 0; len(idx) > 0; attempt++ {
		start := time.Now()
		errs := r.sink.Write(ctx, events(items, idx))
		r.metrics.SinkSeconds.Observe(time.Since(start).Seconds())
		var again []int
		for j, i := range idx {
			items[i].err = errs[j]
			switch {
			case errs[j] == nil:
				r.step("sink_commit", &items[i])
			case !sink.IsPermanent(errs[j]):
				again = append(again, i)
			}
		}
		if attempt >= r.cfg.Delivery.Retry.MaxRetries || len(again) == 0 || ctx.Err() != nil {
			return
		}
		ctxsleep.For(ctx, r.backoff(uint64(attempt+1)))
		idx = again
	}
}

// sinkTxError carries a TxSink's error out of the outbox transaction, to
// tell it from an outbox (bbolt) error, which is fatal.
type sinkTxError struct{ err error }

func (e sinkTxError) Error() string { return e.err.Error() }
func (e sinkTxError) Unwrap() error { return e.err }
