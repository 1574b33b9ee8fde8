package completion

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// maxBatchWorkers bounds the workers that apply batches at once.
const maxBatchWorkers = 4

// batchLinger is how long the puller waits for one more message before it
// hands on a batch that is not full: long enough to fill batches under
// load, short enough not to delay a lone receipt.
const batchLinger = 2 * time.Millisecond

// counted is a prepared message that holds several inputs (a bundle's
// receipts): batchPipeline weighs it by their count.
type counted interface{ count() int }

// batchPipeline collects up to size inputs (messages, or the receipts of
// bundles) of iter at a time, splits them
// over n workers by the hash prepare returns (one event_id always goes to
// the same worker, so its messages are applied in order), and hands each
// worker its part. handle owns the fate (ACK, NAK) of every message it is
// given. A worker that finds ctx done NAKs its batch instead.
//
// batchPipeline returns only after every worker has stopped. Memory: at
// most 2·n·size messages are outside the iterator's buffer.
func batchPipeline(ctx context.Context, iter jetstream.MessagesContext, n, size int, prepare func(jetstream.Msg) (uint64, any), handle func(context.Context, []laneItem)) error {
	workers := make([]chan []laneItem, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range workers {
		workers[i] = make(chan []laneItem, 1)
		defer close(workers[i])
		wg.Go(func() {
			for b := range workers[i] {
				if ctx.Err() != nil {
					nakAll(b)
				} else {
					handle(ctx, b)
				}
			}
		})
	}
	for {
		msg, err := nextMsg(ctx, iter)
		if msg == nil {
			return err
		}
		parts := make([][]laneItem, n)
		weight := 0
		add := func(m jetstream.Msg) {
			h, prep := prepare(m)
			parts[h%uint64(n)] = append(parts[h%uint64(n)], laneItem{msg: m, prep: prep})
			weight++
			if c, ok := prep.(counted); ok {
				weight += c.count() - 1
			}
		}
		add(msg)
		for weight < size {
			// A timeout hands on what we have; any other error is
			// reported by the next blocking Next.
			m, err := iter.Next(jetstream.NextMaxWait(batchLinger))
			if err != nil {
				break
			}
			add(m)
		}
		for i, p := range parts {
			if len(p) == 0 {
				continue
			}
			select {
			case workers[i] <- p:
			case <-ctx.Done():
				for _, rest := range parts[i:] {
					nakAll(rest)
				}
				return nil
			}
		}
	}
}

func nakAll(b []laneItem) {
	for _, it := range b {
		_ = it.msg.Nak()
	}
}

// handleBatch decides the fate of a batch of receipt messages: each is
// checked as handle does; the receipts that pass are applied with one
// State.ApplyBatch; then each message ends exactly as in handle (ACK after
// its receipts were recorded, which for a batch means after the batch
// committed, or quarantined; NAK with a delay).
func (s *Service) handleBatch(ctx context.Context, b []laneItem) {
	receivedAt := time.Now().UTC()
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	msgs := make([][]unit, len(b))
	for i, it := range b {
		msgs[i] = s.check(it.msg, it.prep)
	}
	s.apply(opCtx, msgs, receivedAt)
	for i, it := range b {
		s.finish(opCtx, it.msg, msgs[i], receivedAt)
	}
	// Before the next batch: a site past its bound of held receipts is
	// brought back within it (held_limit.go).
	s.limitHeld(ctx)
}

// consumeReceipts runs the receipts loop's pipeline on iter: batches
// (ApplyBatch > 1) or one message per lane.
func (s *Service) consumeReceipts(ctx context.Context, iter jetstream.MessagesContext) error {
	if s.cfg.ApplyBatch > 1 {
		return batchPipeline(ctx, iter, min(s.cfg.InFlight, maxBatchWorkers), s.cfg.ApplyBatch, s.prepareReceipt, s.handleBatch)
	}
	return pipeline(ctx, iter, s.cfg.InFlight, s.prepareReceipt, s.handle)
}
