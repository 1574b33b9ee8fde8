package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.etcd.io/bbolt"

	"github.com/leafline/leafline/internal/failpoint"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipts"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// runner is the edge's sink runner. Per fetched batch it:
//
//  1. extracts each message's event_id (a message without one is a
//     permanent failure);
//  2. writes the events through the sink, idempotently by event_id;
//  3. for each permanent failure, with a DLQ configured: publishes a DLQ
//     record and waits for its PubAck;
//  4. commits every receipt — processed, and dead_lettered for the
//     dead-lettered events — and, for a TxSink, the business records, to the
//     bbolt outbox in ONE transaction;
//  5. publishes the receipts not yet published to the local receipts stream
//     and waits for every PubAck; marks them published in the outbox;
//  6. only then ACKs the source messages (or, for dead letters with
//     dead_letter.ack_term_after_publish, terminates them), confirmed when
//     delivery.ack_confirmation is enabled.
//
// Any failure before step 6 leaves the message unacked (NAK with backoff,
// or left for AckWait), so it is redelivered and finds its existing outbox
// record and DLQ record. A bbolt commit error is fatal: run returns it and
// the box stops.
//
// The steps of consecutive batches overlap in four goroutines, so that
// the fetch of one batch, the outbox fsync of another and the receipts
// stream writes of two more run at the same time:
//
//	fetcher (1) ──▶ committer (2-4; mark, 6) ◀──▶ 2 publishers (5: sign, publish, PubAck)
//	    ▲               │
//	    └── permit ─────┘
//
// The committer does every outbox write, in order: a batch's commit, and
// the marks of the batches the publishers have handed back, each followed by
// that batch's final acknowledgements. The marks ride in the next batch's
// commit transaction when a fetched batch is waiting (a transaction and
// its fsyncs fewer per batch), else in one of their own. The fetcher
// fetches (and decodes) the next batch only with a permit, which the
// committer grants once per batch, after the batch's plain-sink write and
// DLQ publishes and before its outbox commit: at most one batch waits
// fetched, and nothing is fetched once shutdown began (a batch already
// fetched is finished). At most publishDepth committed batches are with
// the publishers. Every batch is covered by InProgress heartbeats (when
// enabled) from its fetch to its final acknowledgement. Each message still
// passes steps 1-6 in order; only different batches overlap, and a crash
// anywhere leaves at most a few batches unacked, to be redelivered like
// one.
//
// NOTE: a batch may wait for the batches ahead of it (a commit, up to
// publishDepth receipt publishes bounded by outbox.publish_timeout) before
// it is ACKed, and its mark and ACKs wait for the committer to finish what
// it is doing: with a slow plain sink, the next batch's sink write. Size
// AckWait for that, or enable InProgress.
type runner struct {
	cfg  *topology.Config
	site string
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer
	ob   *outbox.Outbox
	pub  outbox.Publisher
	// pub2, if set, is a second publisher on a connection of its own: the
	// server stages an atomic batch per connection, one at a time, so two
	// publishers overlap two batches' staging (side by side at a 60k
	// backlog: +7% to +14%). Nil: pub publishes every batch.
	pub2     outbox.Publisher
	sink     sink.Sink   // nil when txSink is set
	txSink   sink.TxSink // writes inside the outbox transaction
	eventID  func(jetstream.Msg) (string, error)
	backoff  func(delivered uint64) time.Duration
	progress time.Duration // InProgress interval; zero: none
	metrics  *Metrics
	log      *slog.Logger
	trace    func(step string, it *item) // test hook: records the contract's steps
	gate     <-chan struct{}             // bench hook: if set, run waits for it to close
	// onBatch, if set before the gate opens, is called on the committer's
	// goroutine with each batch's stage times once it is finished (bench
	// hook).
	onBatch func(batchTimes)
	// wrote, if set, is signalled without blocking after each outbox
	// transaction (the App then releases the outbox pages it mapped).
	wrote chan<- struct{}
}

// maxRetryAfter bounds the delay a sink's target may ask for, so that a
// target that asks for hours cannot park a message beyond what an operator
// would look for.
const maxRetryAfter = 5 * time.Minute

// publishDepth is how many committed batches may be with the publishers
// (publishing, queued to publish, or published and not yet finished).
const publishDepth = 3

// item is one message of a batch on its way through the runner.
type item struct {
	msg  jetstream.Msg
	meta *jetstream.MsgMetadata
	ev   sink.Event
	// err is why the message did not succeed; nil means success so far.
	err error
	// dead: its DLQ record was PubAck'ed (err holds the permanent cause);
	// newDead: by this delivery (not by an earlier one).
	dead, newDead bool
	// hold is a failure after which the message must not be ACKed or
	// terminated at all (DLQ publish or receipt publish failed).
	hold error
	// rec is its receipt (processed, or dead_lettered when dead).
	rec    outbox.Record
	hasRec bool
	// digest is receipts.PayloadDigest of its payload (set with rec).
	digest string
}

// batch is one fetched batch on its way through the runner's pipeline. It
// is owned by one goroutine at a time; the channels between them hand it on.
type batch struct {
	items []item
	// stopProgress stops the batch's InProgress heartbeats (idempotent).
	stopProgress func()
	// withRec indexes the items whose receipt was committed.
	withRec []int
	// pending are the receipts that a publisher publishes (stored pending
	// by this or an earlier delivery), each once; publishing indexes the
	// items whose receipt is among them.
	pending    []outbox.Record
	publishing []int
	// published: pending were all PubAck'ed.
	published bool
	// acked: of pending, those PubAck'ed by a publish that failed for
	// others. They are marked all the same, so that the relay does not
	// publish them again; the batch is held as when none was.
	acked []outbox.Record
	// permitted: the fetcher got this batch's permit to fetch the next one.
	permitted bool
	times     batchTimes
}

// batchTimes are a batch's stage times (zero when a stage did not happen).
type batchTimes struct {
	Messages int
	Asked    int       // the fetch asked for this many
	Fetch    time.Time // the fetch that returned the batch began
	Fetched  time.Time // fetched and decoded
	Commit   time.Time // the committer took it
	Durable  time.Time // its outbox commit returned
	PubAck   time.Time // its receipts were PubAck'ed
	Marked   time.Time // its receipts were marked published
	Done     time.Time // its final acknowledgements were sent
}

// errMaxDeliver marks a temporary failure on the last delivery the consumer
// allows, when delivery.max_deliver_action is dead_letter.
var errMaxDeliver = fmt.Errorf("%w: max deliveries reached", sink.ErrPermanent)

// run fetches and processes batches until ctx is done. Every batch fetched
// is finished (or abandoned unacked) before run returns, even when ctx is
// cancelled meanwhile: its publishes and ACKs are bounded by their own
// timeouts. Shutdown never ACKs work that did not complete, and nothing is
// fetched after ctx is done. run returns nil on a clean stop, or the first
// fatal error.
func (r *runner) run(ctx context.Context) error {
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return nil
		}
	}
	fctx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	permit := make(chan struct{}, 1)
	permit <- struct{}{}
	fetched := make(chan *batch)
	go r.fetch(fctx, permit, fetched)
	err := r.commitLoop(context.WithoutCancel(ctx), fetched, permit)
	if err != nil {
		// Fatal: whatever the fetcher still holds is left unacked.
		stopFetch()
		for b := range fetched {
			r.abandon(b)
		}
	}
	return err
}

// commitLoop is the committer. It takes fetched batches until in is closed,
// commits each and hands it to the publisher goroutines; a batch that comes
// back PubAck'ed is marked published and finished. It returns nil once
// every batch is finished, or the first fatal (outbox) error: the batches
// in flight are then abandoned unacked.
func (r *runner) commitLoop(ctx context.Context, in <-chan *batch, permit chan<- struct{}) error {
	// inflight < publishDepth before every send, so neither channel blocks.
	toPublish := make(chan *batch, publishDepth)
	published := make(chan *batch, publishDepth)
	// Each publisher takes the next batch when it is free; batches may come
	// back out of order, and each is marked and finished on its own.
	var pwg sync.WaitGroup
	for _, p := range []outbox.Publisher{r.pub, r.pub2} {
		if p == nil {
			continue
		}
		pwg.Go(func() {
			for b := range toPublish {
				r.publishBatch(ctx, b, p)
				published <- b
			}
		})
	}
	go func() { pwg.Wait(); close(published) }()
	defer func() {
		close(toPublish)
		for b := range published { // none, unless returning an error
			r.abandon(b)
		}
	}()
	inflight := 0
	// handedBack takes every batch the publishers have handed back by now,
	// after the ones in back.
	handedBack := func(back ...*batch) []*batch {
		for {
			select {
			case b := <-published:
				back = append(back, b)
			default:
				inflight -= len(back)
				return back
			}
		}
	}
	// commitNext commits b, and in the same transaction marks the batches
	// handed back by then (back, and any that came back during b's sink
	// write), then finishes those and hands b to the publishers.
	commitNext := func(b *batch, back ...*batch) error {
		back, err := r.commitBatch(ctx, b, permit, func() []*batch { return handedBack(back...) })
		if err != nil {
			r.abandon(b)
			for _, bb := range back {
				r.abandon(bb)
			}
			return err
		}
		r.finishMarked(ctx, back)
		if len(b.pending) == 0 {
			r.finishBatch(ctx, b)
			return nil
		}
		toPublish <- b
		inflight++
		return nil
	}
	for {
		var next <-chan *batch
		if inflight < publishDepth {
			next = in
		}
		if next == nil && inflight == 0 {
			return nil // in is closed and every batch is finished
		}
		// A fetched batch goes first: its commit also marks what the
		// publishers handed back. Handed-back batches are marked in a
		// transaction of their own only when no fetched batch is waiting.
		var b *batch
		ok, fetched := false, false
		select {
		case b, ok = <-next:
			fetched = true
		default:
			select {
			case b, ok = <-next:
				fetched = true
			case b = <-published:
			}
		}
		if fetched {
			if !ok {
				in = nil
				continue
			}
			if err := commitNext(b); err != nil {
				return err
			}
			continue
		}
		// b came back: there is room for a fetched batch to carry its mark.
		if in != nil {
			select {
			case nb, ok := <-in:
				if !ok {
					in = nil
					break
				}
				if err := commitNext(nb, b); err != nil {
					return err
				}
				continue
			default:
			}
		}
		back := handedBack(b)
		if err := r.markAndFinish(ctx, back); err != nil {
			for _, b := range back {
				r.abandon(b)
			}
			return err
		}
	}
}

// fetch fetches batches into out until ctx is done, then closes out. It
// fetches a non-empty batch only with a permit; empty fetches (an idle
// consumer) repeat without one. A batch fetched is always handed on, even
// after ctx is done: its messages are delivered and the committer finishes
// them.
func (r *runner) fetch(ctx context.Context, permit <-chan struct{}, out chan<- *batch) {
	defer close(out)
	d := r.cfg.Delivery
	wait := time.Duration(d.BatchTimeoutMS) * time.Millisecond
	// size grows to backlog_batch_size after a full fetch (a backlog: one
	// commit and one receipts batch for more events) and is back to
	// batch_size after a short one, so a box that keeps up keeps its
	// latency.
	size := d.BatchSize
	for {
		select {
		case <-ctx.Done():
			return
		case <-permit:
		}
		for {
			if ctx.Err() != nil {
				return
			}
			start, asked := time.Now(), size
			fb, err := r.cons.Fetch(asked, jetstream.FetchMaxWait(wait))
			if err != nil {
				r.log.Warn("fetch failed", "err", err)
				sleepCtx(ctx, time.Second)
				continue
			}
			var msgs []jetstream.Msg
			for m := range fb.Messages() {
				msgs = append(msgs, m)
			}
			if err := fb.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
				r.log.Debug("fetch ended", "err", err)
			}
			if len(msgs) == 0 {
				size = d.BatchSize
				continue
			}
			size = d.BatchSize
			if len(msgs) >= asked {
				size = d.BacklogBatchSize
			}
			b := r.newBatch(msgs)
			b.times.Fetch, b.times.Asked = start, asked
			out <- b
			break
		}
	}
}

// ackEarlySettle is how long the negative control waits after its early
// ACKs before it goes on (see newBatch).
const ackEarlySettle = 300 * time.Millisecond

// newBatch decodes msgs and starts their InProgress heartbeats.
func (r *runner) newBatch(msgs []jetstream.Msg) *batch {
	r.metrics.fetched.Add(float64(len(msgs)))
	b := &batch{items: make([]item, len(msgs))}
	for i, msg := range msgs {
		b.items[i] = r.decode(msg)
	}
	b.stopProgress = r.heartbeat(b.items)
	b.times.Messages, b.times.Fetched = len(msgs), time.Now()
	if failpoint.Enabled(failpoint.EdgeAckEarly) {
		// Negative control for the chaos checker: ACK before anything is
		// durable. Never enabled outside fault-injection runs.
		// DoubleAck waits until the server has taken each ACK; the pause
		// outlasts the server's consumer-state writer (it writes at most
		// every 100 ms), so a kill that follows loses work whose ACK is
		// already on disk: the loss the checker must see. Without the
		// pause a kill within 100 ms also loses the ACK, the message is
		// redelivered and the control proves nothing.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for i := range b.items {
			_ = b.items[i].msg.DoubleAck(ctx)
		}
		cancel()
		time.Sleep(ackEarlySettle)
	}
	return b
}

// permitNext lets the fetcher fetch the batch after b (once per batch).
func (r *runner) permitNext(b *batch, permit chan<- struct{}) {
	if b.permitted {
		return
	}
	b.permitted = true
	select {
	case permit <- struct{}{}:
	default: // one permit is always enough: the fetcher holds no second batch
	}
}

// finishBatch stops b's heartbeats and sends its final acknowledgements.
func (r *runner) finishBatch(ctx context.Context, b *batch) {
	b.stopProgress()
	r.finish(ctx, b.items)
	b.times.Done = time.Now()
	if r.onBatch != nil {
		r.onBatch(b.times)
	}
}

// abandon leaves b's messages unacked (after a fatal error): they are
// redelivered and find their outbox records.
func (r *runner) abandon(b *batch) {
	b.stopProgress()
}

func (r *runner) step(name string, it *item) {
	if r.trace != nil {
		r.trace(name, it)
	}
}

// commitBatch runs steps 2-4 for b: the sink write, the DLQ path and the
// outbox transaction. On return b.pending holds the receipts b must
// publish. Only an outbox error is returned: it is fatal.
//
// After the sink write it calls takeBack, once, for the batches handed
// back by the publishers, and marks their PubAck'ed receipts published in
// b's outbox transaction (marks first: a receipt of b marked there is not
// published again). It returns them, marked, for their final
// acknowledgements; with an error, unmarked.
func (r *runner) commitBatch(ctx context.Context, b *batch, permit chan<- struct{}, takeBack func() []*batch) ([]*batch, error) {
	m := r.metrics
	items := b.items
	b.times.Commit = time.Now()

	// Sink write (outside the transaction for a plain Sink).
	if r.sink != nil {
		ok := okItems(items)
		if len(ok) > 0 {
			r.writeSink(ctx, items, ok)
		}
	}
	failpoint.Inject(failpoint.EdgeAfterSinkWrite)
	r.applyMaxDeliver(items)
	if r.cfg.DeadLetter.Enabled {
		r.deadLetter(ctx, items)
	}
	// The next batch may be fetched now: while this one commits and
	// publishes. (Not before the sink write: a shutdown during a slow
	// write fetches nothing more.)
	r.permitNext(b, permit)
	back := takeBack()
	marks := publishedRecs(back)

	// One outbox transaction for every receipt of the batch, the DLQ
	// markers and, for a TxSink, the business records; and the marks.
	var markers [][]byte
	for i := range items {
		it := &items[i]
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
	if len(b.withRec) == 0 && len(markers) == 0 {
		return back, r.mark(marks)
	}
	recs := make([]outbox.Record, len(b.withRec))
	for j, i := range b.withRec {
		recs[j] = items[i].rec
	}
	var evs []sink.Event
	if ok := okItems(items); r.txSink != nil && len(ok) > 0 {
		evs = events(items, ok)
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
	if r.txSink != nil && len(evs) > 0 {
		m.sinkSeconds.Observe(time.Since(start).Seconds())
	}
	var serr sinkTxError
	if errors.As(err, &serr) {
		// The sink refused the batch and rolled the transaction back:
		// nothing of it is committed, every message is held.
		r.log.Warn("transactional sink failed; batch rolled back", "messages", len(items), "err", serr.err)
		for i := range items {
			if items[i].hold == nil {
				items[i].hold = serr.err
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
	seen := make(map[string]bool, len(b.withRec))
	for j, i := range b.withRec {
		it := &items[i]
		r.noteReuse(it, stored[j])
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
		}
	}
	for _, i := range b.withRec {
		if seen[items[i].rec.Key] {
			b.publishing = append(b.publishing, i)
		}
	}
	failpoint.Inject(failpoint.EdgeAfterOutboxCommit)
	return back, nil
}

// writeSink writes the items through the plain Sink, retrying temporary
// failures in place up to delivery.retry.max_retries times with backoff.
func (r *runner) writeSink(ctx context.Context, items []item, idx []int) {
	for attempt := 0; len(idx) > 0; attempt++ {
		start := time.Now()
		errs := r.sink.Write(ctx, events(items, idx))
		r.metrics.sinkSeconds.Observe(time.Since(start).Seconds())
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
		sleepCtx(ctx, r.backoff(uint64(attempt+1)))
		idx = again
	}
}

// sinkTxError carries a TxSink's error out of the outbox transaction, to
// tell it from an outbox (bbolt) error, which is fatal.
type sinkTxError struct{ err error }

func (e sinkTxError) Error() string { return e.err.Error() }
func (e sinkTxError) Unwrap() error { return e.err }

// applyMaxDeliver turns a temporary failure on the last allowed delivery
// into a permanent one when max_deliver_action is dead_letter.
func (r *runner) applyMaxDeliver(items []item) {
	d := r.cfg.Delivery
	if d.MaxDeliver <= 0 {
		return
	}
	for i := range items {
		it := &items[i]
		if it.err == nil || sink.IsPermanent(it.err) || it.meta.NumDelivered < uint64(d.MaxDeliver) {
			continue
		}
		if d.MaxDeliverAction == "dead_letter" {
			r.metrics.maxDeliverExhausted.Inc()
			it.err = fmt.Errorf("%w: %w", errMaxDeliver, it.err)
		}
	}
}

// lastDelivery counts and logs a message that the server will not deliver
// again (max_deliver reached with max_deliver_action leave): never silent.
func (r *runner) lastDelivery(it *item) {
	d := r.cfg.Delivery
	if d.MaxDeliver > 0 && d.MaxDeliverAction != "dead_letter" && it.meta.NumDelivered >= uint64(d.MaxDeliver) {
		r.metrics.maxDeliverExhausted.Inc()
		r.log.Warn("max deliveries reached: the server will not redeliver this message (max_deliver_action leave)",
			r.attrs(it, "max_deliver", d.MaxDeliver)...)
	}
}

// deadLetter publishes a DLQ record for every permanent failure and waits
// for the PubAcks. A dead-lettered event with an event_id gets a
// dead_lettered receipt. A DLQ publish failure holds the message: no ACK,
// no Term.
func (r *runner) deadLetter(ctx context.Context, items []item) {
	type pending struct {
		i   int
		fut jetstream.PubAckFuture
	}
	var futs []pending
	fail := func(it *item, err error) {
		it.hold = err
		r.metrics.dlqPublishErrors.Inc()
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
func (r *runner) markDead(it *item) {
	it.dead = true
	it.hasRec = false
	if it.ev.ID == "" {
		return
	}
	rec, err := r.digestReceiptRecord(it.ev.ID, receipts.StatusDeadLettered, errorType(it.err), it.digest)
	if err != nil {
		it.hold = err
		return
	}
	it.rec, it.hasRec = rec, true
}

// dlqMarkers is the bbolt bucket of DLQ record keys already PubAck'ed,
// committed in the same transaction as the batch's receipts.
var dlqMarkers = []byte("edge.dlq")

func (r *runner) dlqKey(it *item) string {
	return dlqMsgID(r.site, it.meta.Stream, it.meta.Sequence.Stream)
}

func (r *runner) dlqRecorded(it *item) (bool, error) {
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

func (r *runner) dlqRecord(it *item) DLQRecord {
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
		if errors.Is(it.err, ErrNoEventID) {
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

// publishBatch publishes b's pending receipts and waits for every PubAck
// (step 5). On a publish failure the items with receipts are held (no
// ACK); the relay retries the receipts.
func (r *runner) publishBatch(ctx context.Context, b *batch, pub outbox.Publisher) {
	items, pending := b.items, b.pending
	for _, i := range b.publishing {
		r.step("receipt_publish", &items[i])
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Outbox.PublishTimeout.D())
	start := time.Now()
	err := pub.Publish(pctx, pending)
	cancel()
	failpoint.Inject(failpoint.EdgeBeforePubAck)
	r.metrics.pubAckSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		r.metrics.receiptPublishErrors.Inc()
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
	r.metrics.receiptsPublished.Add(float64(len(pending)))
}

// markAndFinish marks the PubAck'ed receipts of bs published, in one
// transaction, then sends each batch's final acknowledgements (step 6).
// Only an outbox error is returned: it is fatal, and no batch of bs is
// then finished.
func (r *runner) markAndFinish(ctx context.Context, bs []*batch) error {
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
func (r *runner) mark(recs []outbox.Record) error {
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
func (r *runner) signalWrote() {
	select {
	case r.wrote <- struct{}{}:
	default:
	}
}

// finishMarked sends the final acknowledgements of bs, whose PubAck'ed
// receipts are marked published.
func (r *runner) finishMarked(ctx context.Context, bs []*batch) {
	now := time.Now()
	for _, b := range bs {
		if b.published {
			b.times.Marked = now
		}
		r.finishBatch(ctx, b)
	}
}

// finish sends each message's final acknowledgement according to its outcome.
func (r *runner) finish(ctx context.Context, items []item) {
	m := r.metrics
	for i := range items {
		it := &items[i]
		switch {
		case it.hold != nil:
			r.retry(it, it.hold)
		case it.err == nil:
			if r.ack(ctx, it) {
				m.processed.Inc()
			}
		case it.dead:
			if it.newDead {
				m.deadLettered.Inc()
			}
			r.logDeadLetter(it)
			if r.cfg.DeadLetter.AckTermAfterPub {
				r.term(ctx, it)
			} else {
				r.ack(ctx, it)
			}
		case sink.IsPermanent(it.err):
			// No DLQ configured: never ACK as processed; leave it for the
			// operator and count it.
			r.lastDelivery(it)
			m.permanentUnacked.Inc()
			r.step("leave", it)
			r.log.Warn("permanent failure left unacked (no DLQ configured)", r.attrs(it, "error_type", errorType(it.err))...)
		default:
			r.retry(it, it.err)
		}
	}
}

// retry handles a temporary failure: NAK with backoff, or leave the message
// for redelivery after AckWait.
func (r *runner) retry(it *item, cause error) {
	r.lastDelivery(it)
	if r.cfg.Delivery.Retry.TemporaryFailureAction == "leave_unacked" {
		r.step("leave", it)
		r.log.Info("temporary failure left unacked", r.attrs(it, "reason", cause.Error())...)
		return
	}
	// The target's own delay (an HTTP Retry-After, say) when it asks for
	// a longer one than the backoff.
	delay := max(r.backoff(it.meta.NumDelivered), min(sink.RetryDelay(cause), maxRetryAfter))
	r.step("nak", it)
	if err := it.msg.NakWithDelay(delay); err != nil {
		r.log.Warn("nak failed; the message will be redelivered after AckWait", r.attrs(it, "err", err)...)
		return
	}
	r.metrics.nacked.Inc()
	r.log.Info("nak", r.attrs(it, "delay", delay, "reason", cause.Error())...)
}

// ack sends the final ACK, confirmed (DoubleAck) when configured. A failed
// or timed-out confirmation is a redelivery-risk event: counted and logged;
// the message may come back and is then an idempotent duplicate.
func (r *runner) ack(ctx context.Context, it *item) bool {
	conf := r.cfg.Delivery.AckConfirmation
	if !conf.Enabled {
		r.step("ack", it)
		if err := it.msg.Ack(); err != nil {
			r.log.Warn("ack failed; the message will be redelivered and handled as a duplicate", r.attrs(it, "err", err)...)
			return false
		}
		r.metrics.acked.Inc()
		r.log.Debug("ack", r.attrs(it)...)
		return true
	}
	r.step("double_ack", it)
	err := r.confirm(ctx, it, func(cctx context.Context) error { return it.msg.DoubleAck(cctx) })
	if err != nil {
		return false
	}
	r.metrics.acked.Inc()
	return true
}

// term terminates a dead-lettered message. With confirmation enabled the
// +TERM is sent as a request on the message's reply subject, which the
// server answers: a confirmed AckTerm.
func (r *runner) term(ctx context.Context, it *item) {
	conf := r.cfg.Delivery.AckConfirmation
	if !conf.Enabled {
		r.step("term", it)
		if err := it.msg.Term(); err != nil {
			r.log.Warn("term failed; the message will be redelivered and dead-lettered again idempotently", r.attrs(it, "err", err)...)
			return
		}
		r.metrics.terminated.Inc()
		r.log.Info("term", r.attrs(it)...)
		return
	}
	r.step("confirmed_term", it)
	err := r.confirm(ctx, it, func(cctx context.Context) error {
		_, err := r.nc.RequestWithContext(cctx, it.msg.Reply(), []byte("+TERM"))
		return err
	})
	if err == nil {
		r.metrics.terminated.Inc()
	}
}

func (r *runner) confirm(ctx context.Context, it *item, send func(context.Context) error) error {
	m := r.metrics
	m.ackConfAttempts.Inc()
	cctx, cancel := context.WithTimeout(ctx, time.Duration(r.cfg.Delivery.AckConfirmation.TimeoutMS)*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := send(cctx)
	m.ackConfSeconds.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		m.ackConfSuccesses.Inc()
		r.log.Debug("confirmed", r.attrs(it)...)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		m.ackConfTimeouts.Inc()
		r.log.Warn("confirm-timeout: durable work is done but the server did not confirm; the message may be redelivered and will be handled as a duplicate", r.attrs(it, "err", err)...)
	default:
		m.ackConfFailures.Inc()
		r.log.Warn("confirm-failed: durable work is done but the confirmation failed; the message may be redelivered and will be handled as a duplicate", r.attrs(it, "err", err)...)
	}
	return err
}

// heartbeat sends InProgress for the batch's messages every r.progress
// until the returned stop is called (idempotent).
func (r *runner) heartbeat(items []item) (stop func()) {
	if r.progress <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.progress)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for i := range items {
					_ = items[i].msg.InProgress()
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// decode extracts the event from a message; a bad message gets a permanent error.
func (r *runner) decode(msg jetstream.Msg) item {
	it := item{msg: msg}
	meta, err := msg.Metadata()
	if err != nil {
		it.err = sink.Permanent(fmt.Errorf("no JetStream metadata: %w", err))
		it.meta = &jetstream.MsgMetadata{}
		return it
	}
	it.meta = meta
	if meta.NumDelivered > 1 {
		r.metrics.redeliveries.Inc()
	}
	it.ev = sink.Event{Subject: msg.Subject(), OriginStream: r.cfg.Topology.Events.OriginStream, Data: msg.Data(), StreamSeq: meta.Sequence.Stream}
	// The event_id comes first, so that any later permanent failure (an
	// oversize message) can still be reported to L1 as dead_lettered.
	id, err := r.eventID(msg)
	if err != nil {
		it.err = err
		return it
	}
	// The receipt is built here so that an event_id the receipt format
	// refuses is this message's permanent failure, never a batch's.
	it.digest = receipts.PayloadDigest(msg.Data())
	if it.rec, err = r.digestReceiptRecord(id, receipts.StatusProcessed, "", it.digest); err != nil {
		it.err = fmt.Errorf("%w: %w", ErrNoEventID, err)
		return it
	}
	it.ev.ID, it.hasRec = id, true
	if size := len(msg.Data()); size > r.cfg.Delivery.MaxMessageBytes {
		it.err = fmt.Errorf("%w: %d bytes > %d", ErrOversize, size, r.cfg.Delivery.MaxMessageBytes)
	}
	return it
}

func (r *runner) receiptRecord(eventID string, status receipts.Status, reason string) (outbox.Record, error) {
	return r.digestReceiptRecord(eventID, status, reason, "")
}

// digestReceiptRecord is receiptRecord with the payload's digest
// (receipts.PayloadDigest) in the receipt.
func (r *runner) digestReceiptRecord(eventID string, status receipts.Status, reason, digest string) (outbox.Record, error) {
	rc := receipts.New(eventID, r.cfg.Topology.Events.OriginStream, r.site, r.site, status, time.Now().UTC())
	rc.Reason, rc.PayloadSHA256 = reason, digest
	data, err := rc.Encode()
	if err != nil {
		return outbox.Record{}, err
	}
	return outbox.Record{
		Key:     rc.MsgID(),
		Subject: r.cfg.Topology.ReceiptSubject(r.site, string(rc.Status)),
		Data:    data,
	}, nil
}

// attrs are the log attributes of an item: never the payload or headers.
func (r *runner) attrs(it *item, extra ...any) []any {
	a := []any{"event_id", it.ev.ID, "stream", it.meta.Stream, "seq", it.meta.Sequence.Stream, "delivered", it.meta.NumDelivered}
	return append(a, extra...)
}

func okItems(items []item) []int {
	var ok []int
	for i := range items {
		if items[i].err == nil {
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

// eventIDExtractor returns the configured way to read an event_id.
func eventIDExtractor(c topology.EventIDConfig) func(jetstream.Msg) (string, error) {
	check := func(id string) (string, error) {
		if len(id) > c.MaxLength {
			return "", fmt.Errorf("%w: %d bytes > %d", ErrNoEventID, len(id), c.MaxLength)
		}
		return id, nil
	}
	if c.JSONField != "" {
		field := c.JSONField
		return func(m jetstream.Msg) (string, error) {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(m.Data(), &obj); err != nil {
				return "", fmt.Errorf("%w: payload is not a JSON object", ErrNoEventID)
			}
			raw, ok := obj[field]
			if !ok {
				return "", fmt.Errorf("%w: JSON field %q missing", ErrNoEventID, field)
			}
			var id string
			if err := json.Unmarshal(raw, &id); err != nil {
				return "", fmt.Errorf("%w: JSON field %q is not a string", ErrNoEventID, field)
			}
			return check(id)
		}
	}
	header := c.Header
	return func(m jetstream.Msg) (string, error) {
		id := m.Headers().Get(header)
		if id == "" {
			return "", fmt.Errorf("%w: header %q missing", ErrNoEventID, header)
		}
		return check(id)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// redriven reports whether msg is an event L1 published again because it
// was overdue (receipts.RedriveHeader).
func redriven(msg jetstream.Msg) bool {
	return msg != nil && msg.Headers().Get(receipts.RedriveHeader) != ""
}
