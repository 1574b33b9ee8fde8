package runner

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/failpoint"
)

// fetch fetches batches into out until ctx is done, then closes out. It
// fetches a non-empty batch only with a permit; empty fetches (an idle
// consumer) repeat without one. A batch fetched is always handed on, even
// after ctx is done: its messages are delivered and the committer finishes
// them.
func (r *Runner) fetch(ctx context.Context, permit <-chan struct{}, out chan<- *batch) {
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
				ctxsleep.For(ctx, time.Second)
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
func (r *Runner) newBatch(msgs []jetstream.Msg) *batch {
	r.metrics.Fetched.Add(float64(len(msgs)))
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
func (r *Runner) permitNext(b *batch, permit chan<- struct{}) {
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
func (r *Runner) finishBatch(ctx context.Context, b *batch) {
	b.stopProgress()
	r.finish(ctx, b.items)
	b.times.Done = time.Now()
	if r.hooks.OnBatch != nil {
		r.hooks.OnBatch(b.times)
	}
}

// abandon leaves b's messages unacked (after a fatal error): they are
// redelivered and find their outbox records.
func (r *Runner) abandon(b *batch) {
	b.stopProgress()
}
