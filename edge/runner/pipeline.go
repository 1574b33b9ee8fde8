package runner

import (
	"context"
	"sync"
)

// committer is commitLoop's state, owned by its goroutine.
type committer struct {
	r         *Runner
	ctx       context.Context
	permit    chan<- struct{}
	toPublish chan *batch
	published chan *batch
	// inflight counts the batches with the publishers; it stays below
	// publishDepth before every send, so neither channel blocks.
	inflight int
}

// commitLoop is the committer. It takes fetched batches until in is closed,
// commits each and hands it to the publisher goroutines; a batch that comes
// back PubAck'ed is marked published and finished. It returns nil once
// every batch is finished, or the first fatal (outbox) error: the batches
// in flight are then abandoned unacked.
func (r *Runner) commitLoop(ctx context.Context, in <-chan *batch, permit chan<- struct{}) error {
	c := &committer{r: r, ctx: ctx, permit: permit,
		toPublish: make(chan *batch, publishDepth), published: make(chan *batch, publishDepth)}
	// Each publisher takes the next batch when it is free; batches may come
	// back out of order, and each is marked and finished on its own.
	var pwg sync.WaitGroup
	for _, p := range r.pubs {
		if p == nil {
			continue
		}
		pwg.Go(func() {
			for b := range c.toPublish {
				r.publishBatch(ctx, b, p)
				c.published <- b
			}
		})
	}
	go func() { pwg.Wait(); close(c.published) }()
	defer func() {
		close(c.toPublish)
		for b := range c.published { // none, unless returning an error
			r.abandon(b)
		}
	}()
	return c.loop(in)
}

// loop is commitLoop's loop: a fetched batch goes first, since its commit
// also marks what the publishers handed back. Handed-back batches are
// marked in a transaction of their own only when no fetched batch is
// waiting.
func (c *committer) loop(in <-chan *batch) error {
	for {
		var next <-chan *batch
		if c.inflight < publishDepth {
			next = in
		}
		if next == nil && c.inflight == 0 {
			return nil // in is closed and every batch is finished
		}
		var b *batch
		ok, fetched := false, false
		select {
		case b, ok = <-next:
			fetched = true
		default:
			select {
			case b, ok = <-next:
				fetched = true
			case b = <-c.published:
			}
		}
		if fetched {
			if !ok {
				in = nil
				continue
			}
			if err := c.commitNext(b); err != nil {
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
				if err := c.commitNext(nb, b); err != nil {
					return err
				}
				continue
			default:
			}
		}
		if err := c.markBack(b); err != nil {
			return err
		}
	}
}

// handedBack takes every batch the publishers have handed back by now,
// after the ones in back.
func (c *committer) handedBack(back ...*batch) []*batch {
	for {
		select {
		case b := <-c.published:
			back = append(back, b)
		default:
			c.inflight -= len(back)
			return back
		}
	}
}

// commitNext commits b, and in the same transaction marks the batches
// handed back by then (back, and any that came back during b's sink
// write), then finishes those and hands b to the publishers.
func (c *committer) commitNext(b *batch, back ...*batch) error {
	r := c.r
	back, err := r.commitBatch(c.ctx, b, c.permit, func() []*batch { return c.handedBack(back...) })
	if err != nil {
		r.abandon(b)
		for _, bb := range back {
			r.abandon(bb)
		}
		return err
	}
	r.finishMarked(c.ctx, back)
	if len(b.pending) == 0 {
		r.finishBatch(c.ctx, b)
		return nil
	}
	c.toPublish <- b
	c.inflight++
	return nil
}

// markBack marks b, and every other batch handed back by now, in a
// transaction of their own and finishes them.
func (c *committer) markBack(b *batch) error {
	back := c.handedBack(b)
	if err := c.r.markAndFinish(c.ctx, back); err != nil {
		for _, b := range back {
			c.r.abandon(b)
		}
		return err
	}
	return nil
}
