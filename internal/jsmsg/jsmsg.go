// Package jsmsg adapts messages read from a stream to code written for
// consumed messages, and publishes many with a window of PubAcks.
package jsmsg

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stored presents a message read from a stream (a direct or API get) as a
// jetstream.Msg to code that reads only its subject, headers and payload,
// such as an event_id extractor. Any other method panics: the caller
// recovers, or gives it only to such code.
func Stored(raw *jetstream.RawStreamMsg) jetstream.Msg { return stored{raw: raw} }

type stored struct {
	jetstream.Msg
	raw *jetstream.RawStreamMsg
}

func (m stored) Data() []byte         { return m.raw.Data }
func (m stored) Headers() nats.Header { return m.raw.Header }
func (m stored) Subject() string      { return m.raw.Subject }

// PublishWindowed publishes the messages msg(0) … msg(n-1) asynchronously,
// in order, with at most window PubAcks outstanding, and returns once every
// one is PubAck'ed or the first error.
func PublishWindowed(ctx context.Context, js jetstream.JetStream, n, window int, msg func(i int) *nats.Msg) error {
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

// Connect opens a connection to url and a JetStream context on it.
func Connect(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
