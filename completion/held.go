package completion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
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
	held, err := st.HeldEvents(ctx, record.MaxSummaryScan)
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
func (s *Service) expireEvent(ctx context.Context, st record.State, c *record.Completion) (bool, error) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	c.Derive()
	if c.Status != record.EventOriginUnknown || time.Since(c.LastHeld()) < s.cfg.HoldFor {
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
		"event_id", receipt.ShortQuote(c.EventID), "refusal", RefusedOriginUnknown, "processors", procs, "hold_for", s.cfg.HoldFor)
	return true, nil
}

// quarantineHeld publishes the quarantine record of the receipt c holds
// for processor p, and waits for its PubAck.
func (s *Service) quarantineHeld(ctx context.Context, c *record.Completion, p string) error {
	h := c.Held[p]
	r := receipt.Receipt{
		Version: receipt.SchemaVersion, ReceiptID: h.ReceiptID, EventID: c.EventID, OriginStream: c.OriginStream,
		Processor: p, Site: h.Site, Status: h.Status, ProcessedAt: h.ProcessedAt, Reason: h.Reason,
	}
	data, err := r.Encode()
	if err != nil {
		return fmt.Errorf("receipts: quarantine held receipt: %w", err)
	}
	rec := QuarantineRecord{
		Reason: receipt.TruncateUTF8(fmt.Sprintf("%s: event %s was not published at L1 within %s of its last receipt; held receipt of processor %s, nothing was recorded",
			RefusedOriginUnknown, receipt.ShortQuote(c.EventID), s.cfg.HoldFor, p), receipt.MaxReasonLen),
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
