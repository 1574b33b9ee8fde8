package kvstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// MaxApplyBatch is the largest number of records one atomic batch of
// ApplyBatch writes; a larger call is split. It stays well below the
// server's default atomic batch limit (1000 messages).
const MaxApplyBatch = 256

// expectedLastSubjSeqHeader is the per-message compare-and-set the server
// checks inside an atomic batch: the subject's last sequence must be the
// given one (0: the subject holds no message). It is what kv.Create and
// kv.Update send for a single write.
const expectedLastSubjSeqHeader = "Nats-Expected-Last-Subject-Sequence"

// getConcurrency bounds the record reads ApplyBatch runs at once.
const getConcurrency = 16

// BatchStats count how ApplyBatch wrote, since OpenStore.
type BatchStats struct {
	// Batches: atomic batches committed; Records: records they wrote.
	Batches, Records uint64
	// Fallbacks: batches not committed (an expectation failed, or the
	// stream refused the batch) whose receipts were then applied one by one.
	Fallbacks uint64
}

// ApplyBatch records items as if ApplyOutcome were called for each in
// order, and returns one result per item, in order. The outcome of each
// (event_id, processor) is exactly what the per-receipt path gives: the
// first terminal status is recorded once, later receipts are counted.
//
// The receipts of one event are folded into one record write. The records
// of up to MaxApplyBatch events are written with ONE atomic batch publish to
// the bucket's stream, each message carrying the compare-and-set of a
// single write (Nats-Expected-Last-Subject-Sequence: the revision that was
// read, 0 for a new key). The server commits all of them or none. If any
// expectation fails (another writer got in between) or the batch is
// refused (e.g. the stream does not allow atomic publish), nothing of it was
// written and its receipts are applied one by one with ApplyOutcome: no
// receipt is lost or applied twice. A batch whose answer is lost is
// resolved by reading its records back; if it cannot be shown to have
// landed, its receipts go the per-receipt way too (a receipt that did land
// is then counted once more as a Duplicate, as with ApplyOutcome's
// at-least-once counters).
//
// Index entries that become true are written before the batch; entries
// that became false are removed after it, as in ApplyOutcome. An item's Err
// wraps ErrIndexIncomplete (with its Outcome set) when only that removal
// failed.
func (s *Store) ApplyBatch(ctx context.Context, items []record.BatchItem) []record.BatchResult {
	res := make([]record.BatchResult, len(items))
	var order []string
	groups := map[string][]int{}
	for i, it := range items {
		if err := it.Receipt.Validate(); err != nil {
			res[i].Err = err
			continue
		}
		id := it.Receipt.EventID
		if _, ok := groups[id]; !ok {
			order = append(order, id)
		}
		groups[id] = append(groups[id], i)
	}
	for start := 0; start < len(order); start += MaxApplyBatch {
		chunk := order[start:min(start+MaxApplyBatch, len(order))]
		gs := make([]*batchGroup, len(chunk))
		for j, id := range chunk {
			gs[j] = &batchGroup{eventID: id, idx: groups[id], written: map[idxKey]bool{}}
		}
		s.applyChunk(ctx, items, gs, res)
	}
	return res
}

// BatchStats returns the counters of ApplyBatch.
func (s *Store) BatchStats() BatchStats {
	return BatchStats{Batches: s.batches.Load(), Records: s.batchRecords.Load(), Fallbacks: s.batchFallbacks.Load()}
}

// batchGroup is the receipts of one event in one batch and the record
// write they make.
type batchGroup struct {
	eventID string
	idx     []int // positions in items, in order
	c       record.Completion
	rev     uint64 // revision read; 0 = absent
	old     []idxKey
	val     []byte // the record to write; nil = nothing to write
	written map[idxKey]bool
	outs    []record.Outcome
	seqs    []uint64
	errs    []error  // refusals, per receipt
	repair  []string // processors of repeated receipts: redo their removals
	perItem bool     // apply this group's receipts one by one
}

// applyChunk runs one atomic batch for gs (at most MaxApplyBatch events).
func (s *Store) applyChunk(ctx context.Context, items []record.BatchItem, gs []*batchGroup, res []record.BatchResult) {
	if s.js == nil { // NewStore: no stream to batch into
		for _, g := range gs {
			g.perItem = true
		}
	} else {
		s.readGroups(ctx, gs)
	}
	s.writeChunk(ctx, items, gs, res)
}

// writeChunk folds each group read by readGroups into its record, commits
// the records as one atomic batch (or applies the receipts one by one
// where it cannot), and fills in res.
func (s *Store) writeChunk(ctx context.Context, items []record.BatchItem, gs []*batchGroup, res []record.BatchResult) {
	var msgs []*nats.Msg
	var batched []*batchGroup
	for _, g := range gs {
		if !g.perItem {
			s.foldGroup(ctx, items, g)
		}
		if !g.perItem && g.val != nil {
			msgs = append(msgs, s.casMsg(g))
			batched = append(batched, g)
		}
	}
	if len(msgs) > 0 && !s.commitBatch(ctx, msgs, batched) {
		s.batchFallbacks.Add(1)
		for _, g := range batched {
			g.perItem = true
		}
	}
	// Each group's follow-up (index removals, or the per-receipt path)
	// touches its own event only, so groups proceed in parallel.
	eachGroup(gs, func(g *batchGroup) {
		if g.perItem {
			for _, i := range g.idx {
				res[i].Outcome, res[i].OriginSeq, res[i].Err = s.ApplyReceipt(ctx, items[i].Receipt, items[i].ReceivedAt)
			}
			return
		}
		var ierr error
		if g.val != nil {
			ierr = s.cleanup(ctx, idToken(g.eventID), &g.c, g.old, g.written, g.repairKeys)
		}
		for j, i := range g.idx {
			res[i] = record.BatchResult{Outcome: g.outs[j], OriginSeq: g.seqs[j], Err: g.errs[j]}
			if res[i].Err == nil && ierr != nil {
				res[i].Err = ierr
			}
		}
	})
}

// eachGroup runs f for every group, getConcurrency at a time.
func eachGroup(gs []*batchGroup, f func(*batchGroup)) {
	sem := make(chan struct{}, getConcurrency)
	var wg sync.WaitGroup
	for _, g := range gs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(g)
		})
	}
	wg.Wait()
}

// readGroups reads the record of every group, a few at a time. A group
// whose record cannot be read is applied one by one (which reports the
// error, e.g. a corrupt record to quarantine).
func (s *Store) readGroups(ctx context.Context, gs []*batchGroup) {
	eachGroup(gs, func(g *batchGroup) {
		c, rev, _, err := s.get(ctx, g.eventID)
		switch {
		case errors.Is(err, record.ErrNotFound):
			g.c = record.Completion{EventID: g.eventID, Processors: map[string]record.ProcessorRecord{}}
		case err != nil:
			g.perItem = true
		default:
			g.c, g.rev, g.old = c, rev, indexKeys(&c)
		}
	})
}

// foldGroup applies the group's receipts in order to its record (exactly
// the decisions of applyOutcome), writes the index entries that become
// true, and sets the value to write.
func (s *Store) foldGroup(ctx context.Context, items []record.BatchItem, g *batchGroup) {
	n := len(g.idx)
	g.outs, g.seqs, g.errs = make([]record.Outcome, n), make([]uint64, n), make([]error, n)
	changed := false
	for j, i := range g.idx {
		r, at := items[i].Receipt, items[i].ReceivedAt.UTC()
		if g.outs[j], g.errs[j] = g.c.FoldReceipt(r, at, s.holdUnknown); g.errs[j] != nil {
			continue
		}
		g.seqs[j] = g.c.OriginSeq
		if g.outs[j] != record.Applied && g.outs[j] != record.Held {
			g.repair = append(g.repair, r.Processor)
		}
		changed = true
	}
	if !changed {
		return
	}
	g.c.Derive()
	if err := s.addIndex(ctx, idToken(g.eventID), &g.c, g.old, g.written, false); err != nil {
		g.perItem = true
		return
	}
	val, err := json.Marshal(g.c)
	if err != nil {
		g.perItem = true
		return
	}
	g.val = val
}

// repairKeys are the removals a repeated receipt implies (see
// applyOutcome's repair), for every processor of the group.
func (g *batchGroup) repairKeys(c *record.Completion) []idxKey {
	if len(g.repair) == 0 {
		return nil
	}
	keys := []idxKey{eventKey(kindPending)}
	for _, p := range g.repair {
		keys = append(keys, siteKey(kindPending, p), siteKey(kindDead, p), siteKey(kindExpired, p))
	}
	return keys
}

// commitBatch publishes msgs as one atomic batch and reports whether it
// was committed. A definite refusal (an expectation failed, the stream
// refused the batch) means nothing was written. A lost answer is resolved
// by reading the records back: the batch is atomic, so one record found
// as written means all were.
func (s *Store) commitBatch(ctx context.Context, msgs []*nats.Msg, gs []*batchGroup) bool {
	cctx, cancel := context.WithTimeout(ctx, s.callTimeout+time.Duration(len(msgs))*time.Millisecond)
	_, err := jetstreamext.PublishMsgBatch(cctx, s.js, msgs)
	cancel()
	if err == nil {
		s.batches.Add(1)
		s.batchRecords.Add(uint64(len(msgs)))
		return true
	}
	if refused(err) {
		return false
	}
	for _, g := range gs {
		_, _, raw, gerr := s.get(ctx, g.eventID)
		if gerr == nil && bytes.Equal(raw, g.val) {
			s.batches.Add(1)
			s.batchRecords.Add(uint64(len(msgs)))
			return true
		}
	}
	return false
}

// refused reports whether err is the server's answer refusing a batch
// (so that nothing of it was written), rather than a lost answer.
func refused(err error) bool {
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr)
}

// casMsg is g's record write as a message of an atomic batch, with the
// compare-and-set of a single write: 0 (no message yet) for a new key, or
// the revision that was read.
func (s *Store) casMsg(g *batchGroup) *nats.Msg {
	m := nats.NewMsg(s.kvSubject(KVKey(g.eventID)))
	m.Data = g.val
	m.Header.Set(expectedLastSubjSeqHeader, strconv.FormatUint(g.rev, 10))
	return m
}

// kvSubject is the subject of a key in the completion bucket's stream.
func (s *Store) kvSubject(key string) string {
	return "$KV." + s.kv.Bucket() + "." + key
}

// enableAtomic lets the completion bucket's stream take atomic batches
// (a stream update of that one field; idempotent).
func enableAtomic(ctx context.Context, js jetstream.JetStream, bucket string) error {
	stream, err := js.Stream(ctx, StreamPrefix+bucket)
	if err != nil {
		return fmt.Errorf("receipts: bucket %s: %w", bucket, err)
	}
	cfg := stream.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		return nil
	}
	cfg.AllowAtomicPublish = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("receipts: bucket %s: allow atomic publish: %w", bucket, err)
	}
	return nil
}
