package edge

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

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

	// sign signs with signer's ed25519 key, derived once (an nkeys
	// KeyPair derives it again on every Sign); set on first use.
	signOnce sync.Once
	sign     func(data []byte) (string, error)
}

// signFunc returns the signing function for p.signer: a receipts.Signer
// when the key pair holds a seed, else the key pair itself (which then
// reports why it cannot sign).
func (p *receiptPublisher) signFunc() func(data []byte) (string, error) {
	p.signOnce.Do(func() {
		if s, err := receipts.NewSigner(p.signer); err == nil {
			p.sign = func(data []byte) (string, error) { return s.Sign(data), nil }
			return
		}
		kp := p.signer
		p.sign = func(data []byte) (string, error) { return receipts.Sign(kp, data) }
	})
	return p.sign
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
	sigs, err := p.signAll(recs)
	if err != nil {
		return err
	}
	if len(recs) == 1 {
		_, err := p.js.PublishMsg(ctx, p.msg(recs[0], sigs[0]))
		return wrapPublish(err)
	}
	msgs := make([]*nats.Msg, len(recs))
	for i, r := range recs {
		msgs[i] = p.msg(r, sigs[i])
	}
	_, err = jetstreamext.PublishMsgBatch(ctx, p.js, msgs)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrAtomicDuplicate {
		// PublishMsgBatch has put its batch headers on msgs: build them again.
		return p.publishEach(ctx, recs, sigs)
	}
	return wrapPublish(err)
}

// publishEach publishes records one by one, pipelined, and waits for all.
func (p *receiptPublisher) publishEach(ctx context.Context, recs []outbox.Record, sigs []string) error {
	futs := make([]jetstream.PubAckFuture, 0, len(recs))
	for i, r := range recs {
		f, err := p.js.PublishMsgAsync(p.msg(r, sigs[i]))
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

// signAll returns the SignatureHeader value of each record ("" each when
// there is no signer), computed once per chunk: the one-by-one fallback
// reuses them.
func (p *receiptPublisher) signAll(recs []outbox.Record) ([]string, error) {
	sigs := make([]string, len(recs))
	if p.signer == nil {
		return sigs, nil
	}
	sign := p.signFunc()
	// Signing is CPU only and each signature independent: split the chunk
	// over the cores (an ed25519 signature costs tens of microseconds, a
	// batch of 256 several milliseconds of the publish stage).
	workers := min(runtime.GOMAXPROCS(0), (len(recs)+minSignShare-1)/minSignShare)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(recs)/workers, (w+1)*len(recs)/workers
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				sig, err := sign(recs[i].Data)
				if err != nil {
					errs[w] = err
					return
				}
				sigs[i] = sig
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, wrapPublish(err)
	}
	return sigs, nil
}

// minSignShare is the fewest receipts worth a signing goroutine of their own.
const minSignShare = 32

// msg is the receipt message of r, signed with sig unless sig is "".
func (p *receiptPublisher) msg(r outbox.Record, sig string) *nats.Msg {
	m := nats.NewMsg(r.Subject)
	m.Data = r.Data
	m.Header.Set(jetstream.MsgIDHeader, r.Key)
	if sig != "" {
		m.Header.Set(receipts.SignatureHeader, sig)
	}
	return m
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
