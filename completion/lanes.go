package completion

import (
	"context"
	"hash/fnv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/receipt"
)

// laneQueue is the number of messages that may wait for each lane.
const laneQueue = 2

type laneItem struct {
	msg  jetstream.Msg
	prep any
}

// pipeline hands each message of iter to one of n lanes until ctx is done
// or the iterator fails. prepare runs in the pulling goroutine and returns
// the lane hash and whatever handle needs (for example the decoded
// receipt); handle runs in the lane and owns the message's fate (ACK, NAK).
//
// A lane that finds ctx done NAKs its queued messages instead of handling
// them. pipeline returns only after every lane has stopped, so the caller
// may then release the iterator's buffer. Memory: at most n×(laneQueue+1)
// messages are outside the iterator's buffer.
func pipeline(ctx context.Context, iter jetstream.MessagesContext, n int, prepare func(jetstream.Msg) (uint64, any), handle func(context.Context, jetstream.Msg, any)) error {
	lanes := make([]chan laneItem, n)
	var wg sync.WaitGroup
	for i := range lanes {
		lanes[i] = make(chan laneItem, laneQueue)
		wg.Add(1)
		go func(ch <-chan laneItem) {
			defer wg.Done()
			for it := range ch {
				if ctx.Err() != nil {
					_ = it.msg.Nak()
					continue
				}
				handle(ctx, it.msg, it.prep)
			}
		}(lanes[i])
	}
	defer func() {
		for _, ch := range lanes {
			close(ch)
		}
		wg.Wait()
	}()
	for {
		msg, err := nextMsg(ctx, iter)
		if msg == nil {
			return err
		}
		h, prep := prepare(msg)
		select {
		case lanes[h%uint64(n)] <- laneItem{msg: msg, prep: prep}:
		case <-ctx.Done():
			_ = msg.Nak()
			return nil
		}
	}
}

// nextMsg waits for the next message of iter. It returns a nil message
// when ctx is done (with a nil error) or the iterator failed.
func nextMsg(ctx context.Context, iter jetstream.MessagesContext) (jetstream.Msg, error) {
	msg, err := iter.Next(jetstream.NextContext(ctx))
	if ctx.Err() != nil {
		// Next may return a buffered message even when ctx is done.
		if err == nil {
			_ = msg.Nak()
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return msg, nil
}

// laneHash hashes an event_id to a lane.
func laneHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// seqHash spreads messages without a usable event_id over the lanes.
func seqHash(msg jetstream.Msg) uint64 {
	if meta, err := msg.Metadata(); err == nil {
		return meta.Sequence.Stream
	}
	return 0
}

// decoded is what prepareReceipt hands to handle: the receipt of a
// message, or the receipts of a bundle.
type decoded struct {
	us     []unit
	bundle bool
	err    error // the message as a whole cannot be read
}

func (d decoded) count() int { return len(d.us) }

// prepareReceipt decodes a message. A single receipt goes to the lane of
// its event_id; a bundle, which holds many events, to the lane of its
// stream sequence (its receipts are then applied in their order).
func (s *Service) prepareReceipt(msg jetstream.Msg) (uint64, any) {
	if receipt.IsBundle(msg.Headers()) || receipt.IsBundleSubject(msg.Subject()) {
		return seqHash(msg), decodeBundle(msg)
	}
	r, err := receipt.Decode(msg.Data())
	if err != nil {
		return seqHash(msg), decoded{us: []unit{{raw: msg.Data()}}, err: err}
	}
	return laneHash(r.EventID), decoded{us: []unit{{r: r, raw: msg.Data()}}}
}

// decodeBundle splits a bundle into its receipts; one that cannot be
// decoded is a unit with an error, quarantined alone.
func decodeBundle(msg jetstream.Msg) decoded {
	parts, err := receipt.SplitBundle(msg.Data(), msg.Headers().Get(receipt.BundleHeader))
	if err != nil {
		return decoded{us: []unit{{raw: msg.Data()}}, bundle: true, err: err}
	}
	d := decoded{us: make([]unit, len(parts)), bundle: true}
	for i, p := range parts {
		d.us[i].raw = p
		d.us[i].r, d.us[i].err = receipt.Decode(p)
	}
	return d
}
