package edge

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipts"
)

// maxAtomicBatch is the server's default limit on one atomic batch.
const maxAtomicBatch = 1000

// receiptPublisher writes outbox records into the local receipts stream and
// returns nil only when every record is PubAck'ed (stored, or recognised as a
// duplicate by its Nats-Msg-Id). It implements outbox.Publisher.
//
// A batch is written as one atomic batch publish: one fsync under SyncAlways
// instead of one per receipt. The server rejects a whole atomic batch if any
// of its Nats-Msg-Ids was already stored (a republish after a lost PubAck);
// such a batch is then published message by message, where a duplicate is
// simply acknowledged as one.
type receiptPublisher struct {
	js jetstream.JetStream
	// signer, if set, signs each receipt (receipts.SignatureHeader).
	signer nkeys.KeyPair
	// onPubAck is called with the number of records PubAck'ed (metrics).
	onPubAck func(n int)
}

// jsErrAtomicDuplicate is the server's "atomic publish contains duplicate
// message" error code.
const jsErrAtomicDuplicate jetstream.ErrorCode = 10201

func (p *receiptPublisher) Publish(ctx context.Context, recs []outbox.Record) error {
	for len(recs) > 0 {
		n := min(len(recs), maxAtomicBatch)
		if err := p.publishChunk(ctx, recs[:n]); err != nil {
			return err
		}
		if p.onPubAck != nil {
			p.onPubAck(n)
		}
		recs = recs[n:]
	}
	return nil
}

func (p *receiptPublisher) publishChunk(ctx context.Context, recs []outbox.Record) error {
	if len(recs) == 1 {
		m, err := p.msg(recs[0])
		if err != nil {
			return err
		}
		_, err = p.js.PublishMsg(ctx, m)
		return wrapPublish(err)
	}
	msgs := make([]*nats.Msg, len(recs))
	for i, r := range recs {
		m, err := p.msg(r)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	_, err := jetstreamext.PublishMsgBatch(ctx, p.js, msgs)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrAtomicDuplicate {
		return p.publishEach(ctx, recs)
	}
	return wrapPublish(err)
}

// publishEach publishes records one by one, pipelined, and waits for all.
func (p *receiptPublisher) publishEach(ctx context.Context, recs []outbox.Record) error {
	futs := make([]jetstream.PubAckFuture, 0, len(recs))
	for _, r := range recs {
		m, err := p.msg(r)
		if err != nil {
			return err
		}
		f, err := p.js.PublishMsgAsync(m)
		if err != nil {
			return wrapPublish(err)
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return wrapPublish(err)
		case <-ctx.Done():
			return wrapPublish(ctx.Err())
		}
	}
	return nil
}

func (p *receiptPublisher) msg(r outbox.Record) (*nats.Msg, error) {
	m := nats.NewMsg(r.Subject)
	m.Data = r.Data
	m.Header.Set(jetstream.MsgIDHeader, r.Key)
	if p.signer != nil {
		sig, err := receipts.Sign(p.signer, r.Data)
		if err != nil {
			return nil, wrapPublish(err)
		}
		m.Header.Set(receipts.SignatureHeader, sig)
	}
	return m, nil
}

// ErrReceiptPublish means a receipt was not PubAck'ed: the source message is
// not ACKed and the relay retries the receipt.
var ErrReceiptPublish = errors.New("receipt publish failed")

func wrapPublish(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrReceiptPublish, err)
}
