package bench

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishWindowed publishes the messages msg(0) … msg(n-1) asynchronously,
// in order, with at most window PubAcks outstanding, and returns once every
// one is PubAck'ed or the first error.
func publishWindowed(ctx context.Context, js jetstream.JetStream, n, window int, msg func(i int) *nats.Msg) error {
	futs := make([]jetstream.PubAckFuture, 0, window)
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := range n {
		if len(futs) == window {
			if err := wait(futs[0]); err != nil {
				return err
			}
			futs = futs[1:]
		}
		f, err := js.PublishMsgAsync(msg(i))
		if err != nil {
			return err
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		if err := wait(f); err != nil {
			return err
		}
	}
	return nil
}
