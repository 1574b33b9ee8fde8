package edge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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

	// batchSigner is signer's receipts.Signer, derived once (an nkeys
	// KeyPair derives its ed25519 key again on every Sign); set on first
	// use, nil when signer holds no seed.
	signOnce    sync.Once
	batchSigner *receipts.Signer
}

// jsErrAtomicDuplicate is the server's "atomic publish contains duplicate
// message" error code.
const jsErrAtomicDuplicate jetstream.ErrorCode = 10201

// Publish publishes recs in chunks of at most maxAtomicBatch. When it
// fails after some records were PubAck'ed (earlier chunks, or some of a
// chunk published one by one), its error wraps an *outbox.PartialError
// that names them, so that they are marked and not published again.
func (p *receiptPublisher) Publish(ctx context.Context, recs []outbox.Record) error {
	for done := 0; done < len(recs); {
		n := min(len(recs)-done, maxAtomicBatch)
		acked, err := p.publishChunk(ctx, recs[done:done+n])
		if err != nil {
			if done+len(acked) == 0 {
				return err
			}
			if p.onPubAck != nil {
				p.onPubAck(len(acked))
			}
			published := make([]int, 0, done+len(acked))
			for i := range done {
				published = append(published, i)
			}
			for _, i := range acked {
				published = append(published, done+i)
			}
			return &outbox.PartialError{Published: published, Err: err}
		}
		if p.onPubAck != nil {
			p.onPubAck(n)
		}
		done += n
	}
	return nil
}

// publishChunk publishes recs as one atomic batch, or one by one after the
// server found a duplicate in it. On error, acked holds the indexes of the
// records PubAck'ed all the same (only one by one).
func (p *receiptPublisher) publishChunk(ctx context.Context, recs []outbox.Record) (acked []int, err error) {
	sigs, proofs, err := p.signAll(recs)
	if err != nil {
		return nil, err
	}
	if len(recs) == 1 {
		_, err := p.js.PublishMsg(ctx, p.msg(recs[0], sigs[0], proofs[0]))
		return nil, wrapPublish(err)
	}
	msgs := make([]*nats.Msg, len(recs))
	for i, r := range recs {
		msgs[i] = p.msg(r, sigs[i], proofs[i])
	}
	_, err = jetstreamext.PublishMsgBatch(ctx, p.js, msgs)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrAtomicDuplicate {
		// PublishMsgBatch has put its batch headers on msgs: build them again.
		return p.publishEach(ctx, recs, sigs, proofs)
	}
	return nil, wrapPublish(err)
}

// publishEach publishes records one by one, pipelined, and waits for every
// answer; with an error (the first), acked holds the indexes of the
// records that were PubAck'ed all the same.
func (p *receiptPublisher) publishEach(ctx context.Context, recs []outbox.Record, sigs, proofs []string) (acked []int, err error) {
	futs := make([]jetstream.PubAckFuture, 0, len(recs))
	for i, r := range recs {
		f, perr := p.js.PublishMsgAsync(p.msg(r, sigs[i], proofs[i]))
		if perr != nil {
			err = perr
			break
		}
		futs = append(futs, f)
	}
	for i, f := range futs {
		select {
		case <-f.Ok():
			acked = append(acked, i)
		case ferr := <-f.Err():
			err = cmp.Or(err, ferr)
		case <-ctx.Done():
			return acked, wrapPublish(cmp.Or(err, ctx.Err()))
		}
	}
	if err != nil {
		return acked, wrapPublish(err)
	}
	return nil, nil
}

// signAll returns the SignatureHeader and ProofHeader values of each
// record ("" each when there is no signer), computed once per chunk: the
// one-by-one fallback reuses them. A chunk is signed as a batch: an
// ed25519 signature per group of receipts, over their hash tree
// (receipts.ProofHeader).
func (p *receiptPublisher) signAll(recs []outbox.Record) (sigs, proofs []string, err error) {
	if p.signer == nil {
		return make([]string, len(recs)), make([]string, len(recs)), nil
	}
	p.signOnce.Do(func() { p.batchSigner, _ = receipts.NewSigner(p.signer) })
	if p.batchSigner == nil {
		// No seed: the key pair itself says why it cannot sign.
		sigs, proofs = make([]string, len(recs)), make([]string, len(recs))
		for i := range recs {
			if sigs[i], err = receipts.Sign(p.signer, recs[i].Data); err != nil {
				return nil, nil, wrapPublish(err)
			}
		}
		return sigs, proofs, nil
	}
	data := make([][]byte, len(recs))
	for i := range recs {
		data[i] = recs[i].Data
	}
	sigs, proofs = p.batchSigner.SignBatch(data)
	return sigs, proofs, nil
}

// msg is the receipt message of r, signed with sig unless sig is "", and
// with proof, its place in a signed batch, unless proof is "".
func (p *receiptPublisher) msg(r outbox.Record, sig, proof string) *nats.Msg {
	m := nats.NewMsg(r.Subject)
	m.Data = r.Data
	m.Header.Set(jetstream.MsgIDHeader, r.Key)
	if sig != "" {
		m.Header.Set(receipts.SignatureHeader, sig)
	}
	if proof != "" {
		m.Header.Set(receipts.ProofHeader, proof)
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
