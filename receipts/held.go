package receipts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Held receipts expire. A receipt for an event whose origin the tracker has
// not seen is held (Completion.Held, status origin_unknown); if no origin
// arrives within HoldFor of the last receipt held for it, the event was
// never published at L1 (or left the origin stream unseen), and the held
// receipts are quarantined with the refusal origin_unknown and the record
// is removed. The quarantine records are written before the record goes,
// so a crash in between leaves the receipts held, never lost; the removal
// is a compare-and-set on the revision read, so a receipt or an origin
// that arrives meanwhile keeps the record.

// expireHeldLoop expires held receipts every HoldFor/4 (at most every
// minute) until ctx is done.
func (s *Service) expireHeldLoop(ctx context.Context) {
	every := min(max(s.cfg.HoldFor/4, 100*time.Millisecond), time.Minute)
	for sleep(ctx, every) {
		if _, err := s.expireHeld(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("receipts: expiring held receipts", "err", err)
		}
	}
}

// expireHeld runs one round over the events whose origin is unknown (at
// most MaxSummaryScan of them) and returns how many records it removed.
func (s *Service) expireHeld(ctx context.Context) (int, error) {
	st := s.State()
	if st == nil {
		return 0, nil
	}
	held, err := st.HeldEvents(ctx, MaxSummaryScan)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for i := range held {
		if ctx.Err() != nil {
			break
		}
		removed, err := s.expireEvent(ctx, st, &held[i])
		if err != nil {
			errs = append(errs, err)
		}
		if removed {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// expireEvent quarantines the held receipts of c and removes its record,
// if it holds receipts only and the last was held HoldFor ago.
func (s *Service) expireEvent(ctx context.Context, st State, c *Completion) (bool, error) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	c.derive()
	if c.Status != EventOriginUnknown || time.Since(c.LastHeld()) < s.cfg.HoldFor {
		return false, nil
	}
	procs := slices.Sorted(maps.Keys(c.Held))
	for _, p := range procs {
		if err := s.quarantineHeld(opCtx, c, p); err != nil {
			return false, err
		}
	}
	removed, err := st.DropHeld(opCtx, c)
	if !removed || err != nil {
		return false, err
	}
	s.heldExpired.Add(uint64(len(procs)))
	for range procs {
		s.refused.add(RefusedOriginUnknown)
	}
	s.log.Warn("receipts: held receipts quarantined: their event was not published at L1 in time",
		"event_id", quoteShort(c.EventID), "refusal", RefusedOriginUnknown, "processors", procs, "hold_for", s.cfg.HoldFor)
	return true, nil
}

// HeldEvents returns up to limit records of status origin_unknown, from
// the pending index entries without published_at; none without an index.
func (st *Store) HeldEvents(ctx context.Context, limit int) ([]Completion, error) {
	if st.ix == nil {
		return nil, nil
	}
	var ids []string
	if _, err := st.scan(ctx, eventKey(kindPending).String()+".>", func(e idxEntry) {
		if _, id, err := parseIndexKey(e.Key); err == nil && len(e.Value) == 0 && len(ids) < limit {
			ids = append(ids, id)
		}
	}); err != nil {
		return nil, err
	}
	var out []Completion
	for _, id := range ids {
		c, _, _, err := st.get(ctx, id)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorruptRecord) {
			continue
		}
		if err != nil {
			return out, err
		}
		if c.Status == EventOriginUnknown {
			out = append(out, c)
		}
	}
	return out, nil
}

// DropHeld removes the record of c.EventID if it still is c (same last
// change, still origin_unknown), by a purge on the revision read, and then
// what is left of it (dropRecord).
func (st *Store) DropHeld(ctx context.Context, c *Completion) (bool, error) {
	now, rev, _, err := st.get(ctx, c.EventID)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorruptRecord) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if now.Status != EventOriginUnknown || !now.UpdatedAt.Equal(c.UpdatedAt) {
		return false, nil // changed since it was read: a receipt or the origin arrived
	}
	if err := st.kv.Purge(ctx, KVKey(c.EventID), jetstream.LastRevision(rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return false, nil
		}
		return false, fmt.Errorf("receipts: remove the record of %s: %w", quoteShort(c.EventID), err)
	}
	return true, st.dropRecord(ctx, c.EventID)
}

// quarantineHeld publishes the quarantine record of the receipt c holds
// for processor p, and waits for its PubAck.
func (s *Service) quarantineHeld(ctx context.Context, c *Completion, p string) error {
	h := c.Held[p]
	r := Receipt{
		Version: SchemaVersion, ReceiptID: h.ReceiptID, EventID: c.EventID, OriginStream: c.OriginStream,
		Processor: p, Site: h.Site, Status: h.Status, ProcessedAt: h.ProcessedAt, Reason: h.Reason,
	}
	data, err := r.Encode()
	if err != nil {
		return fmt.Errorf("receipts: quarantine held receipt: %w", err)
	}
	rec := QuarantineRecord{
		Reason: truncateUTF8(fmt.Sprintf("%s: event %s was not published at L1 within %s of its last receipt; held receipt of processor %s, nothing was recorded",
			RefusedOriginUnknown, quoteShort(c.EventID), s.cfg.HoldFor, p), MaxReasonLen),
		Stream:     s.cfg.Stream,
		Receipt:    data,
		Size:       len(data),
		ReceivedAt: h.ReceivedAt,
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("receipts: quarantine record: %w", err)
	}
	out := &nats.Msg{Subject: s.quarantineSubject, Data: body, Header: nats.Header{}}
	pa, err := s.cfg.JS.PublishMsg(ctx, out,
		jetstream.WithMsgID("rq-held-"+h.ReceiptID),
		jetstream.WithExpectStream(s.cfg.QuarantineStream))
	if err != nil {
		return fmt.Errorf("receipts: quarantine publish: %w", err)
	}
	if !pa.Duplicate {
		s.quarantined.Add(1)
	}
	return nil
}

// dropRecord removes what is left of a purged record: the purge marker
// (so that it counts in no Summary) and the pending index entry. Both
// removals reach only what precedes them: a record written meanwhile
// keeps its messages, and its index entry is written again.
func (st *Store) dropRecord(ctx context.Context, id string) error {
	stream, err := st.js.Stream(ctx, kvStreamPrefix+st.kv.Bucket())
	if err != nil {
		return fmt.Errorf("receipts: bucket stream: %w", err)
	}
	subj := "$KV." + st.kv.Bucket() + "." + KVKey(id)
	m, err := stream.GetLastMsgForSubject(ctx, subj)
	if err == nil && m.Header.Get("KV-Operation") != "" {
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(m.Sequence+1)); err != nil {
			return fmt.Errorf("receipts: drop the purge marker of %s: %w", quoteShort(id), err)
		}
	}
	tok := idToken(id)
	if err := st.ix.remove(ctx, eventKey(kindPending).key(tok)); err != nil {
		return err
	}
	if c, _, _, err := st.get(ctx, id); err == nil {
		// Written since: its entry may have gone with ours.
		c.derive()
		for _, k := range indexKeys(&c) {
			if err := st.ix.create(ctx, k.key(tok), publishedValue(&c)); err != nil {
				return err
			}
		}
	}
	return nil
}
