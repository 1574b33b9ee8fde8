package edge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"
)

// receiptPublisher writes outbox records into the local receipts stream and
// returns nil only when every record is PubAck'ed (stored, or recognised as a
// duplicate by its Nats-Msg-Id). It implements outbox.Publisher.
//
// Receipts published for the first time (PublishFirst) are bundled
// (receipt.EncodeBundle): each bundle is one message, signed once, so the
// receipt path stores, moves and acknowledges one message per bundle at
// every hop to L1. Any other receipt may be in the stream already (a
// redelivered event's, a republish after a lost PubAck): it goes alone,
// under its own Nats-Msg-Id, so that a copy inside the stream's duplicate
// window is dropped there. The messages of a call are one atomic batch
// publish: one fsync under SyncAlways. The server rejects a whole atomic
// batch if any of its Nats-Msg-Ids was already stored; the messages are
// then published one by one, where a duplicate is simply acknowledged as
// one.
type receiptPublisher struct {
	js jetstream.JetStream
	// signer, if set, signs each receipt or bundle (receipt.SignatureHeader).
	signer nkeys.KeyPair
	// onPubAck is called with the number of records PubAck'ed (metrics).
	onPubAck func(n int)
	// prefix is the receipts' subject prefix: a bundle holds the
	// receipts of one class lane (receipt.SplitClass).
	prefix string
	// maxBytes bounds a bundle's body below receipt.MaxBundleBytes, if
	// set (bundleBytes).
	maxBytes int

	// batchSigner is signer's receipt.Signer, derived once (an nkeys
	// KeyPair derives its ed25519 key again on every Sign); set on first
	// use, nil when signer holds no seed.
	signOnce    sync.Once
	batchSigner *receipt.Signer
}

// jsErrAtomicDuplicate is the server's "atomic publish contains duplicate
// message" error code.
const jsErrAtomicDuplicate jetstream.ErrorCode = 10201

// bundle is one message of a publish and the records it carries.
type bundle struct {
	msg  *nats.Msg
	recs []int // indexes into the records published
}

// Publish publishes recs, each alone (see receiptPublisher).
func (p *receiptPublisher) Publish(ctx context.Context, recs []outbox.Record) error {
	return p.PublishFirst(ctx, recs, nil)
}

// PublishFirst publishes recs; first[i] says that recs[i] was never
// published before, and those are bundled (see receiptPublisher; a nil
// first bundles none). When it fails after some records were PubAck'ed
// (messages published one by one), its error wraps an
// *outbox.PartialError that names them, so that they are marked and not
// published again.
func (p *receiptPublisher) PublishFirst(ctx context.Context, recs []outbox.Record, first []bool) error {
	if len(recs) == 0 {
		return nil
	}
	bs, err := p.messages(recs, first)
	if err != nil {
		return err
	}
	acked, err := p.publishBundles(ctx, bs)
	if err == nil {
		if p.onPubAck != nil {
			p.onPubAck(len(recs))
		}
		return nil
	}
	var published []int
	for _, i := range acked {
		published = append(published, bs[i].recs...)
	}
	if len(published) == 0 {
		return err
	}
	slices.Sort(published)
	if p.onPubAck != nil {
		p.onPubAck(len(published))
	}
	return &outbox.PartialError{Published: published, Err: err}
}

// messages builds the messages of recs: the records published again each
// alone, then the first ones in bundles of one class lane each
// (receipt.ClassSubject), of at most receipt.MaxBundleReceipts receipts
// and receipt.MaxBundleBytes, each on its first record's subject with the
// status token receipt.BundleToken (a lone first record of a lane goes
// alone too).
func (p *receiptPublisher) messages(recs []outbox.Record, first []bool) ([]bundle, error) {
	var again, fresh []int
	for i := range recs {
		if i < len(first) && first[i] {
			fresh = append(fresh, i)
		} else {
			again = append(again, i)
		}
	}
	var lanes [][]int
	for _, lane := range p.lanes(recs, fresh) {
		if len(lane) == 1 {
			again = append(again, lane[0])
		} else {
			lanes = append(lanes, lane)
		}
	}
	out, err := p.singles(recs, again)
	if err != nil {
		return nil, err
	}
	for _, lane := range lanes {
		bs, err := p.bundles(recs, lane)
		if err != nil {
			return nil, err
		}
		out = append(out, bs...)
	}
	return out, nil
}

// lanes splits idx by the class lane of each record's subject, keeping
// their order within a lane; the lanes come in the order of their first
// record.
func (p *receiptPublisher) lanes(recs []outbox.Record, idx []int) [][]int {
	var out [][]int
	at := map[string]int{}
	for _, i := range idx {
		_, class := receipt.SplitClass(p.prefix, recs[i].Subject)
		j, ok := at[class]
		if !ok {
			j = len(out)
			at[class] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}

// bundles are the messages of recs[fresh], of one class lane, in
// bundles of at most receipt.MaxBundleReceipts receipts and
// receipt.MaxBundleBytes (maxBytes, if less).
func (p *receiptPublisher) bundles(recs []outbox.Record, fresh []int) ([]bundle, error) {
	limit := receipt.MaxBundleBytes
	if p.maxBytes > 0 {
		limit = min(limit, p.maxBytes)
	}
	var out []bundle
	for lo := 0; lo < len(fresh); {
		hi, size := lo, -1
		for hi < len(fresh) && hi-lo < receipt.MaxBundleReceipts && size+1+len(recs[fresh[hi]].Data) <= limit {
			size += 1 + len(recs[fresh[hi]].Data)
			hi++
		}
		hi = max(hi, lo+1) // a record too large for a bundle fails in EncodeBundle
		b, err := p.bundle(recs, fresh[lo:hi])
		if err != nil {
			return nil, err
		}
		out = append(out, b)
		lo = hi
	}
	return out, nil
}

// singles are the messages of recs[idx], each alone, under its own
// Nats-Msg-Id, signed as one batch: an ed25519 signature per group of
// receipts over their hash tree (receipt.ProofHeader).
func (p *receiptPublisher) singles(recs []outbox.Record, idx []int) ([]bundle, error) {
	data := make([][]byte, len(idx))
	for j, i := range idx {
		data[j] = recs[i].Data
	}
	sigs, proofs := make([]string, len(idx)), make([]string, len(idx))
	if p.signer != nil && len(idx) > 0 {
		s, err := p.batchSignerOf()
		if err != nil {
			return nil, err
		}
		sigs, proofs = s.SignBatch(data)
	}
	out := make([]bundle, len(idx))
	for j, i := range idx {
		m := nats.NewMsg(recs[i].Subject)
		m.Data = recs[i].Data
		m.Header.Set(jetstream.MsgIDHeader, recs[i].Key)
		if sigs[j] != "" {
			m.Header.Set(receipt.SignatureHeader, sigs[j])
		}
		if proofs[j] != "" {
			m.Header.Set(receipt.ProofHeader, proofs[j])
		}
		out[j] = bundle{msg: m, recs: []int{i}}
	}
	return out, nil
}

// bundle is the message of recs[idx] (at least two) as one bundle.
func (p *receiptPublisher) bundle(recs []outbox.Record, idx []int) (bundle, error) {
	data := make([][]byte, len(idx))
	ids := make([]string, len(idx))
	for j, i := range idx {
		data[j], ids[j] = recs[i].Data, recs[i].Key
	}
	body, err := receipt.EncodeBundle(data)
	if err != nil {
		return bundle{}, wrapPublish(err)
	}
	subj, class := receipt.SplitClass(p.prefix, recs[idx[0]].Subject)
	if i := strings.LastIndexByte(subj, '.'); i >= 0 {
		subj = subj[:i]
	}
	m := nats.NewMsg(receipt.ClassSubject(subj+"."+receipt.BundleToken, class))
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, receipt.BundleMsgID(ids))
	m.Header.Set(receipt.BundleHeader, strconv.Itoa(len(idx)))
	if p.signer != nil {
		s, err := p.batchSignerOf()
		if err != nil {
			return bundle{}, err
		}
		m.Header.Set(receipt.SignatureHeader, s.SignBundle(body))
	}
	return bundle{msg: m, recs: idx}, nil
}

// batchSignerOf returns the Signer of p.signer, derived once.
func (p *receiptPublisher) batchSignerOf() (*receipt.Signer, error) {
	p.signOnce.Do(func() { p.batchSigner, _ = receipt.NewSigner(p.signer) })
	if p.batchSigner == nil {
		// No seed: the key pair itself says why it cannot sign.
		_, err := receipt.Sign(p.signer, nil)
		return nil, wrapPublish(cmp.Or(err, errors.New("receipts: the receipt key holds no seed")))
	}
	return p.batchSigner, nil
}

// maxAtomicBatch is the server's default limit on one atomic batch.
const maxAtomicBatch = 1000

// publishBundles publishes bs: one message alone, more in atomic batches
// of at most maxAtomicBatch, a batch one by one after the server found a
// duplicate in it. On error, acked holds the indexes of the bundles
// PubAck'ed all the same (earlier batches, or some published one by one).
func (p *receiptPublisher) publishBundles(ctx context.Context, bs []bundle) (acked []int, err error) {
	if len(bs) == 1 {
		_, err := p.js.PublishMsg(ctx, bs[0].msg)
		return nil, wrapPublish(err)
	}
	for lo := 0; lo < len(bs); lo += maxAtomicBatch {
		chunk := bs[lo:min(lo+maxAtomicBatch, len(bs))]
		got, err := p.publishBatch(ctx, chunk)
		if err != nil {
			for i := range lo {
				acked = append(acked, i)
			}
			for _, i := range got {
				acked = append(acked, lo+i)
			}
			return acked, err
		}
	}
	return nil, nil
}

// publishBatch publishes bs as one atomic batch, or one by one after the
// server found a duplicate in it (see publishBundles).
func (p *receiptPublisher) publishBatch(ctx context.Context, bs []bundle) (acked []int, err error) {
	if len(bs) == 1 {
		return p.publishEach(ctx, bs)
	}
	msgs := make([]*nats.Msg, len(bs))
	for i, b := range bs {
		msgs[i] = copyMsg(b.msg)
	}
	// One round trip: the commit's answer reports any refusal.
	_, err = jetstreamext.PublishMsgBatch(ctx, p.js, msgs, jetstreamext.BatchFlowControl{})
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrAtomicDuplicate {
		return p.publishEach(ctx, bs)
	}
	return nil, wrapPublish(err)
}

// copyMsg copies m with its headers: PublishMsgBatch puts its batch
// headers on the messages it is given.
func copyMsg(m *nats.Msg) *nats.Msg {
	c := nats.NewMsg(m.Subject)
	c.Data = m.Data
	for k, v := range m.Header {
		c.Header[k] = slices.Clone(v)
	}
	return c
}

// publishEach publishes bs one by one, pipelined, and waits for every
// answer; with an error (the first), acked holds the indexes of the
// bundles that were PubAck'ed all the same.
func (p *receiptPublisher) publishEach(ctx context.Context, bs []bundle) (acked []int, err error) {
	futs := make([]jetstream.PubAckFuture, 0, len(bs))
	for _, b := range bs {
		f, perr := p.js.PublishMsgAsync(b.msg)
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

// ErrReceiptPublish means a receipt was not PubAck'ed: the source message is
// not ACKed and the relay retries the receipt.
var ErrReceiptPublish = errors.New("receipt publish failed")

func wrapPublish(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrReceiptPublish, err)
}

// bundleBytes bounds the body of a bundle that crosses a link capped at
// bytesPerSecond (0: none): a quarter of a second's worth, so that a
// bundle of other receipts ahead of an urgent one holds the link's shared
// cap (package hop) for a quarter of a second at most, where a whole
// MaxBundleBytes bundle would hold it for seconds on a slow link. A
// bundle still holds one receipt, whatever its size.
func bundleBytes(bytesPerSecond int64) int {
	if bytesPerSecond <= 0 {
		return 0
	}
	return int(min(bytesPerSecond/4, receipt.MaxBundleBytes))
}
