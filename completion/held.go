package completion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/receipt"
)

// Held receipts expire. A receipt for an event whose origin the tracker has
// not seen is held (Completion.Held, status origin_unknown); if no origin
// arrives within HoldFor of the last receipt held for it, the event was
// never published at L1 (or left the origin stream unseen), and the held
// receipts are quarantined with the refusal origin_unknown and the record
// is removed. A site that holds more than its bound loses its oldest held
// events the same way, sooner (held_limit.go). The quarantine records are written before the record goes,
// so a crash in between leaves the receipts held, never lost; the removal
// is a compare-and-set on the revision read, so a receipt or an origin
// that arrives meanwhile keeps the record.

// expireHeldLoop expires held receipts and keeps the held tally (see
// held_limit.go) every HoldFor/4 (at most every minute), from Run's start
// until ctx is done.
func (s *Service) expireHeldLoop(ctx context.Context) {
	every := min(max(s.cfg.HoldFor/4, 100*time.Millisecond), time.Minute)
	for {
		if _, err := s.expireHeld(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, record.ErrNotReady) {
			s.log.Warn("receipts: expiring held receipts", "err", err)
		}
		s.limitHeld(ctx)
		if !ctxsleep.For(ctx, every) {
			return
		}
	}
}

// expireHeld runs one round over the events whose origin is unknown: it
// counts them again in the held tally, and expires those past HoldFor. It
// returns how many records it removed.
func (s *Service) expireHeld(ctx context.Context) (int, error) {
	st := s.State()
	if st == nil {
		return 0, nil
	}
	s.heldTally.startRebuild()
	since := time.Now()
	held, err := st.HeldEvents(ctx, math.MaxInt32)
	if err != nil {
		s.heldTally.rebuild(nil, time.Time{}) // ends the rebuild, keeps the tally
		return 0, err
	}
	s.heldTally.rebuild(held, since)
	n := 0
	var errs []error
	for i := range held {
		if ctx.Err() != nil {
			break
		}
		c := &held[i]
		c.Derive()
		if c.Status != record.EventOriginUnknown || time.Since(c.LastHeld()) < s.cfg.HoldFor {
			continue
		}
		why := func(p string) string {
			return fmt.Sprintf("%s: event %s was not published at L1 within %s of its last receipt; held receipt of processor %s, nothing was recorded",
				RefusedOriginUnknown, receipt.ShortQuote(c.EventID), s.cfg.HoldFor, p)
		}
		procs, removed, err := s.dropHeld(ctx, st, c, why)
		if err != nil {
			errs = append(errs, err)
		}
		if !removed {
			continue
		}
		n++
		s.heldExpired.Add(uint64(len(procs)))
		for range procs {
			s.refused.add(RefusedOriginUnknown)
		}
		s.log.Warn("receipts: held receipts quarantined: their event was not published at L1 in time",
			"event_id", receipt.ShortQuote(c.EventID), "refusal", RefusedOriginUnknown, "processors", procs, "hold_for", s.cfg.HoldFor)
	}
	return n, errors.Join(errs...)
}

// dropHeld quarantines every receipt c holds (why gives each record's
// reason, by processor), and then removes c's record if it is still c. It
// returns the processors whose receipts it quarantined, and whether it
// removed the record. The quarantine records are PubAck'ed before the
// removal: a crash in between leaves the receipts held, and the next round
// quarantines them again (deduplicated by their receipt ids).
func (s *Service) dropHeld(ctx context.Context, st record.State, c *record.Completion, why func(p string) string) ([]string, bool, error) {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	procs := slices.Sorted(maps.Keys(c.Held))
	for _, p := range procs {
		if err := s.quarantineHeld(opCtx, c, p, why(p)); err != nil {
			return nil, false, err
		}
	}
	removed, err := st.DropHeld(opCtx, c)
	if !removed || err != nil {
		return nil, false, err
	}
	s.heldTally.forget(c.EventID)
	return procs, true, nil
}

// heldReceipt is the receipt c holds for processor p, as L1 received it
// (without its signature).
func heldReceipt(c *record.Completion, p string) receipt.Receipt {
	h := c.Held[p]
	return receipt.Receipt{
		Version: receipt.SchemaVersion, ReceiptID: h.ReceiptID, EventID: c.EventID, OriginStream: c.OriginStream,
		Processor: p, Site: h.Site, Status: h.Status, ProcessedAt: h.ProcessedAt, Reason: h.Reason,
	}
}

// quarantineHeld publishes the quarantine record of the receipt c holds
// for processor p, with reason, and waits for its PubAck.
func (s *Service) quarantineHeld(ctx context.Context, c *record.Completion, p, reason string) error {
	h := c.Held[p]
	data, err := heldReceipt(c, p).Encode()
	if err != nil {
		return fmt.Errorf("receipts: quarantine held receipt: %w", err)
	}
	rec := QuarantineRecord{
		Reason:     receipt.TruncateUTF8(reason, receipt.MaxReasonLen),
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
