package runner

import (
	"context"
	"errors"
	"slices"
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
	var q queue
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
			msgs, err := r.fetchNext(&q, asked, wait)
			if err != nil {
				r.log.Warn("fetch failed", "err", err)
				ctxsleep.For(ctx, time.Second)
				continue
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

// normalShare is the share of batches that the normal consumer is asked
// first for while priority classes have messages: one in normalShare.
const normalShare = 4

// queue is the fetcher's place in the order of its consumers.
type queue struct {
	// urgent counts the batches taken from the classes since the normal
	// consumer was last asked first.
	urgent int
	// failing is the last error a class's consumer gave, logged once.
	failing string
}

// fetchNext fetches one batch of up to n messages, all from one consumer.
// The classes are asked first, most urgent first, without waiting; the
// normal consumer last, waiting up to wait for a message. Every
// normalShare-th batch while classes have messages, the normal consumer
// is asked first, so that normal work keeps at least that share of the
// batches.
func (r *Runner) fetchNext(q *queue, n int, wait time.Duration) ([]jetstream.Msg, error) {
	order := append(slices.Clone(r.classes), r.cons)
	if len(r.classes) > 0 && q.urgent >= normalShare-1 {
		order = append([]jetstream.Consumer{r.cons}, r.classes...)
		q.urgent = 0
	}
	for i, c := range order {
		last := i == len(order)-1
		msgs, err := r.fetchFrom(c, n, wait, !last)
		if err != nil && c != r.cons {
			// A class that cannot be fetched holds no other work up.
			if err.Error() != q.failing {
				q.failing = err.Error()
				r.log.Warn("fetch from a priority class's consumer failed; going on with the others", "stream", c.CachedInfo().Stream, "err", err)
			}
			if !last {
				continue
			}
		}
		if err != nil || len(msgs) > 0 || last {
			if c != r.cons && len(msgs) > 0 {
				q.urgent++
			}
			return msgs, err
		}
	}
	return nil, nil
}

// fetchFrom fetches up to n messages from c: those it has at once when
// noWait, else waiting up to wait for the first.
func (r *Runner) fetchFrom(c jetstream.Consumer, n int, wait time.Duration, noWait bool) ([]jetstream.Msg, error) {
	var fb jetstream.MessageBatch
	var err error
	if noWait {
		fb, err = c.FetchNoWait(n)
	} else {
		fb, err = c.Fetch(n, jetstream.FetchMaxWait(wait))
	}
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range fb.Messages() {
		msgs = append(msgs, m)
	}
	if err := fb.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		r.log.Debug("fetch ended", "err", err) // what it brought is handed on
	}
	return msgs, nil
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
