package kvstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/nats-io/nats.go/jetstream"
)

// maxCASAttempts bounds Apply's read-modify-write retries.
const maxCASAttempts = 16

// Defaults of StoreConfig.
const (
	// DefaultOverdueAfter: an event still pending this long after it was
	// published at L1 is overdue.
	DefaultOverdueAfter = 5 * time.Minute
	// DefaultCallTimeout bounds each KV round trip of the Store.
	DefaultCallTimeout = 3 * time.Second
	// IndexBucketSuffix is appended to the completion bucket's name to name
	// the status index bucket when StoreConfig.IndexBucket is zero.
	IndexBucketSuffix = "_index"
)

// StoreConfig configures OpenStore. Zero values mean the defaults stated on
// each field.
type StoreConfig struct {
	// JS is the JetStream context of the L1 domain. Required.
	JS jetstream.JetStream
	// Bucket holds one completion record per event; zero = DefaultBucket.
	Bucket string
	// IndexBucket holds the status index; zero = Bucket + IndexBucketSuffix.
	IndexBucket string
	// Create makes OpenStore create missing buckets (FileStorage, Replicas;
	// Bucket with History, IndexBucket with history 1) and set an existing
	// Bucket's history to History. False: missing buckets are an error
	// wrapping jetstream.ErrBucketNotFound, and History is ignored.
	Create bool
	// History is the number of revisions Bucket keeps per key, 1..64; zero
	// = 1. Only the latest revision is ever read; more is for audits (the
	// fault-injection checker reads it to prove that no record was applied
	// twice). With Create, an existing bucket with another history is
	// updated in place (MaxMsgsPerSubject of its stream), never recreated or
	// purged: raising it keeps every revision, lowering it drops the older
	// revisions of each key but never the latest record.
	History int
	// Replicas for buckets OpenStore creates; zero = 1.
	Replicas int
	// OverdueAfter: a pending event published this long ago is overdue;
	// zero = DefaultOverdueAfter.
	OverdueAfter time.Duration
	// Sites are always listed in Summary, even with nothing to report.
	Sites []string
	// CallTimeout bounds each KV round trip (also within a longer ctx, so
	// that a write whose answer was lost can be resolved and retried in
	// time); zero = DefaultCallTimeout.
	CallTimeout time.Duration
	// HoldUntilOrigin: a receipt for an event whose origin has not been
	// seen is held (Completion.Held, status origin_unknown) rather than
	// recorded, and counts only once the origin tracker has seen the event
	// published and routed to its processor (see ApplyOrigin). Set it
	// where an origin tracker runs: otherwise nothing ever releases them.
	HoldUntilOrigin bool
}

// Store records completions in a JetStream KV bucket, one key per event
// (see KVKey), and maintains the status index that List and Summary read.
// It is safe for concurrent use, and any number of Stores in any number of
// processes may share the buckets: every record write is a create or a
// compare-and-set on the revision that was read.
type Store struct {
	kv           jetstream.KeyValue
	ix           *index // nil: no status index (NewStore)
	overdueAfter time.Duration
	sites        []string
	callTimeout  time.Duration
	now          func() time.Time
	holdUnknown  bool // StoreConfig.HoldUntilOrigin

	js                                    jetstream.JetStream // for ApplyBatch; nil: NewStore
	batches, batchRecords, batchFallbacks atomic.Uint64
}

// NewStore returns a Store over kv without a status index: Get, Apply,
// ApplyOrigin and All work; List and Summary return ErrNoIndex, and nothing
// maintains an index (a Store made by OpenStore over the same bucket would
// miss these writes in its lists). The bucket should keep one revision per
// key (History 1); more history works but is never read.
func NewStore(kv jetstream.KeyValue) *Store {
	return &Store{kv: kv, overdueAfter: DefaultOverdueAfter, callTimeout: DefaultCallTimeout, now: time.Now}
}

// OverdueAfter returns the Store's overdue threshold.
func (s *Store) OverdueAfter() time.Duration { return s.overdueAfter }

// call returns a context for one KV round trip.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.callTimeout)
}

// Get returns the completion record of eventID, with Status, Conflict,
// Missing and Overdue derived as of now. It returns an error wrapping
// ErrNotFound when the event has no record, ErrInvalid for an eventID no
// receipt could carry, and ErrCorruptRecord for an undecodable record.
func (s *Store) Get(ctx context.Context, eventID string) (record.Completion, error) {
	if err := receipt.CheckEventID(eventID); err != nil {
		return record.Completion{}, fmt.Errorf("%w: %w", receipt.ErrInvalid, err)
	}
	c, _, _, err := s.get(ctx, eventID)
	if err != nil {
		return record.Completion{}, err
	}
	c.View(s.now(), s.overdueAfter)
	return c, nil
}

// get reads the record of eventID, its revision and its raw value.
func (s *Store) get(ctx context.Context, eventID string) (record.Completion, uint64, []byte, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	e, err := s.kv.Get(cctx, KVKey(eventID))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return record.Completion{}, 0, nil, fmt.Errorf("receipts: event %s: %w", receipt.ShortQuote(eventID), record.ErrNotFound)
		}
		return record.Completion{}, 0, nil, fmt.Errorf("receipts: get %s: %w", receipt.ShortQuote(eventID), err)
	}
	c, err := record.DecodeCompletion(e.Value())
	if err == nil && c.EventID != eventID {
		err = fmt.Errorf("%w: record holds another event_id", record.ErrCorruptRecord)
	}
	if err != nil {
		return record.Completion{}, 0, nil, fmt.Errorf("receipts: key %s revision %d: %w", e.Key(), e.Revision(), err)
	}
	return c, e.Revision(), e.Value(), nil
}

// Apply records r. It returns applied=true only the first time (event_id,
// processor) gets a terminal status; a repeat of the same status increments
// Duplicates; a different status increments Conflicts; both return
// applied=false. See ApplyOutcome.
func (s *Store) Apply(ctx context.Context, r receipt.Receipt, receivedAt time.Time) (applied bool, err error) {
	o, err := s.ApplyOutcome(ctx, r, receivedAt)
	return o == record.Applied, err
}

// ApplyOutcome is Apply reporting which of the three cases happened.
//
// It reads the event's record and writes it back with kv.Create when the key
// is absent or kv.Update(key, value, revision) otherwise. If another writer
// got in between (key exists / revision mismatch) it re-reads and decides
// again, up to a bounded number of attempts (then ErrTooManyConflicts). So
// across any number of instances exactly one Apply per (event_id, processor)
// sees Applied, and every other receipt is counted exactly once per
// successful call.
//
// A write whose answer is lost (timeout, connection or leader change) is
// resolved before returning: Apply re-reads the record, with a fresh
// CallTimeout per attempt, until ctx ends; if the record carries this very
// write (the processor's receipt_id and this call's receivedAt) the outcome
// stands, otherwise Apply decides again. So Applied is reported exactly once
// even when the answer to the winning write was lost.
//
// With a status index (OpenStore), index entries that become true are written
// before the record and entries that became false are removed after it; see
// the package documentation. If only that removal fails, the outcome is
// returned together with an error wrapping ErrIndexIncomplete.
//
// NOTE: the counters are at-least-once like the receipts that feed them. If
// the KV write succeeds, its answer is lost and another writer changes the
// record before Apply can re-read it, the caller's retry counts the receipt
// again (as a Duplicate). The recorded status is never affected.
//
// A receipt from a processor the event was not routed to (its origin is
// known and the processor is not in Expected) is refused with
// ErrNotExpected, and nothing is written. With StoreConfig.HoldUntilOrigin,
// a receipt for an event whose origin is unknown is held (Outcome Held).
//
// Errors: r failing Validate → ErrInvalid; ErrNotExpected; an undecodable
// stored record → ErrCorruptRecord (all match ErrQuarantine); anything else
// (KV unavailable, context done, ErrTooManyConflicts) is transient.
func (s *Store) ApplyOutcome(ctx context.Context, r receipt.Receipt, receivedAt time.Time) (record.Outcome, error) {
	out, _, err := s.ApplyReceipt(ctx, r, receivedAt)
	return out, err
}

// ApplyReceipt is ApplyOutcome that also returns the event's origin
// sequence as the record knows it (zero while its origin is unknown).
func (s *Store) ApplyReceipt(ctx context.Context, r receipt.Receipt, receivedAt time.Time) (record.Outcome, uint64, error) {
	if err := r.Validate(); err != nil {
		return 0, 0, err
	}
	receivedAt = receivedAt.UTC()
	var out record.Outcome
	var originSeq uint64
	var refusal error
	_, err := s.update(ctx, change{
		eventID: r.EventID,
		apply: func(c *record.Completion) bool {
			if out, refusal = c.FoldReceipt(r, receivedAt, s.holdUnknown); refusal != nil {
				return false
			}
			originSeq = c.OriginSeq
			return true
		},
		landed: func(c *record.Completion) bool {
			if out != record.Applied && out != record.Held {
				return false
			}
			// A held receipt may have moved on since (see releaseHeld).
			for _, recs := range []map[string]record.ProcessorRecord{c.Processors, c.Held, c.Unexpected} {
				if p, ok := recs[r.Processor]; ok && p.ReceiptID == r.ReceiptID && p.ReceivedAt.Equal(receivedAt) {
					return true
				}
			}
			return false
		},
		repair: func(c *record.Completion) []idxKey {
			// A repeat may follow a write whose index work was cut short
			// (crash, lost answer): redo the removals this receipt implies.
			if out == record.Applied || out == record.Held || refusal != nil {
				return nil
			}
			return []idxKey{eventKey(kindPending), siteKey(kindPending, r.Processor), siteKey(kindDead, r.Processor), siteKey(kindExpired, r.Processor)}
		},
	})
	if err != nil && !errors.Is(err, ErrIndexIncomplete) {
		return 0, 0, err
	}
	if refusal != nil {
		return 0, 0, refusal
	}
	return out, originSeq, err
}

// ApplyOrigin records that event o.EventID was published on the origin
// stream: it creates a pending record if none exists, or merges published_at,
// subject and the expected processors into the record that receipts created
// first (keeping every processor record). A record that already knows its
// origin is left alone (OriginKnown): the first publication wins. Writes are
// create / compare-and-set like ApplyOutcome's, with the same resolution of
// lost answers, and the pending index entries are written before the record.
//
// Held receipts (StoreConfig.HoldUntilOrigin) are released by the merge:
// those of expected processors count from then on, the others are kept in
// Completion.Unexpected and never count.
//
// Errors: o failing Validate → ErrInvalid; a corrupt stored record →
// ErrCorruptRecord; others are transient.
func (s *Store) ApplyOrigin(ctx context.Context, o record.Origin, now time.Time) (record.OriginOutcome, error) {
	out, _, err := s.ApplyOriginRelease(ctx, o, now)
	return out, err
}

// ApplyOriginRelease is ApplyOrigin that also reports what became of held receipts.
func (s *Store) ApplyOriginRelease(ctx context.Context, o record.Origin, now time.Time) (record.OriginOutcome, record.HeldRelease, error) {
	if err := o.Validate(); err != nil {
		return 0, record.HeldRelease{}, err
	}
	now = now.UTC()
	var out record.OriginOutcome
	var hr record.HeldRelease
	_, err := s.update(ctx, change{
		eventID: o.EventID,
		origin:  true,
		apply: func(c *record.Completion) bool {
			out, hr = c.FoldOrigin(o, now)
			return out != record.OriginKnown
		},
		landed: func(c *record.Completion) bool {
			return c.OriginKnown() && c.PublishedAt.Equal(o.PublishedAt.UTC()) && c.OriginSeq == o.Seq
		},
	})
	if err != nil && !errors.Is(err, ErrIndexIncomplete) {
		return 0, record.HeldRelease{}, err
	}
	return out, hr, err
}

// change is one read-modify-write of a record, for update.
type change struct {
	eventID string
	// apply folds the change into c (a record just read, or a new empty
	// one) and reports whether c must be written.
	apply func(c *record.Completion) bool
	// landed reports whether c, read after a write whose answer was lost,
	// already holds that write (only called after apply returned true).
	landed func(c *record.Completion) bool
	// repair lists extra index keys to remove if they are permanently false.
	repair func(c *record.Completion) []idxKey
	// origin: the change is an origin merge; write the pending entries with
	// Put (their values carry published_at) even if they already existed.
	origin bool
}

// update runs ch against the record of ch.eventID; see ApplyOutcome.
func (s *Store) update(ctx context.Context, ch change) (record.Completion, error) {
	key := KVKey(ch.eventID)
	tok := idToken(ch.eventID)
	written := map[idxKey]bool{} // index entries this call wrote
	var (
		ambiguous bool     // a record write's answer was lost
		lastVal   []byte   // the value of that write
		lastOld   []idxKey // the index keys of the record that write replaced
		lastErr   error
	)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if !ambiguous && attempt >= maxCASAttempts {
				return record.Completion{}, fmt.Errorf("receipts: apply to key %s: %w after %d attempts", key, record.ErrTooManyConflicts, maxCASAttempts)
			}
			if err := casBackoff(ctx, min(attempt, 200)); err != nil {
				if ambiguous {
					return record.Completion{}, fmt.Errorf("receipts: apply to key %s: outcome of a write unknown (%v): %w", key, lastErr, err)
				}
				return record.Completion{}, fmt.Errorf("receipts: apply: %w", err)
			}
		}
		c, rev, raw, err := s.get(ctx, ch.eventID)
		absent := errors.Is(err, record.ErrNotFound)
		if err != nil && !absent {
			if ambiguous && !errors.Is(err, receipt.ErrQuarantine) {
				lastErr = err
				continue // keep trying to learn whether the write landed
			}
			return record.Completion{}, err
		}
		if absent {
			c = record.Completion{EventID: ch.eventID, Processors: map[string]record.ProcessorRecord{}}
		}
		if ambiguous && !absent && (bytes.Equal(raw, lastVal) || ch.landed(&c)) {
			return c, s.cleanup(ctx, tok, &c, lastOld, written, ch.repair)
		}
		var old []idxKey
		if !absent {
			old = indexKeys(&c)
		}
		if !ch.apply(&c) {
			return c, s.cleanup(ctx, tok, &c, old, written, ch.repair)
		}
		c.Derive()
		if err := s.addIndex(ctx, tok, &c, old, written, ch.origin); err != nil {
			return record.Completion{}, err
		}
		val, err := json.Marshal(c)
		if err != nil {
			return record.Completion{}, fmt.Errorf("receipts: apply: %w", err)
		}
		cctx, cancel := s.call(ctx)
		if absent {
			_, err = s.kv.Create(cctx, key, val)
		} else {
			_, err = s.kv.Update(cctx, key, val, rev)
		}
		cancel()
		switch {
		case err == nil:
			return c, s.cleanup(ctx, tok, &c, old, written, ch.repair)
		case absent && errors.Is(err, jetstream.ErrKeyExists),
			!absent && errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue // another writer got in first; re-read
		case ctx.Err() != nil:
			return record.Completion{}, fmt.Errorf("receipts: apply to key %s: %w", key, err)
		default:
			ambiguous, lastVal, lastOld, lastErr = true, val, old, err
		}
	}
}

// addIndex writes, before the record, the index entries that c has and
// old did not (for an origin merge: every pending entry, to carry
// published_at). Entries already written by this call are skipped.
func (s *Store) addIndex(ctx context.Context, tok string, c *record.Completion, old []idxKey, written map[idxKey]bool, origin bool) error {
	if s.ix == nil {
		return nil
	}
	val := publishedValue(c)
	for _, k := range indexKeys(c) {
		if written[k] || (slices.Contains(old, k) && !(origin && k.kind == kindPending)) {
			continue
		}
		cctx, cancel := s.call(ctx)
		var err error
		if k == eventKey(kindPending) && !origin {
			err = s.ix.create(cctx, k.key(tok), val) // never clobber published_at
		} else {
			err = s.ix.put(cctx, k.key(tok), val)
		}
		cancel()
		if err != nil {
			return err
		}
		written[k] = true
	}
	return nil
}

// cleanup removes, after the record write, the index entries that are no
// longer true of c and can never be again: those of the replaced record
// (old), those this call wrote in attempts that lost, and repair's.
func (s *Store) cleanup(ctx context.Context, tok string, c *record.Completion, old []idxKey, written map[idxKey]bool, repair func(*record.Completion) []idxKey) error {
	if s.ix == nil {
		return nil
	}
	c.Derive()
	cands := slices.Clone(old)
	for k := range written {
		cands = append(cands, k)
	}
	if repair != nil {
		cands = append(cands, repair(c)...)
	}
	now := indexKeys(c)
	var keys []string
	done := map[idxKey]bool{}
	allPending := allPendingGone(c)
	for _, k := range cands {
		if done[k] || slices.Contains(now, k) || !permanentlyFalse(c, k) {
			continue
		}
		done[k] = true
		if k.kind == kindPending && allPending {
			continue // one purge of "p.*.<tok>" below
		}
		keys = append(keys, k.key(tok))
	}
	for k := range done {
		if k.kind == kindPending && allPending {
			keys = append(keys, "p.*."+tok)
			break
		}
	}
	var errs []error
	for _, key := range keys {
		var err error
		for try := 0; try < 3; try++ {
			cctx, cancel := s.call(ctx)
			err = s.ix.remove(cctx, key)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrIndexIncomplete, errors.Join(errs...))
	}
	return nil
}

// casBackoff sleeps a short, jittered, growing time between CAS attempts so
// that contending writers spread out.
func casBackoff(ctx context.Context, attempt int) error {
	d := time.Duration(attempt) * time.Millisecond
	d += rand.N(d + time.Millisecond)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// All returns every completion record, sorted by EventID. It reads the
// whole bucket into memory and is meant for tests, demos and small
// deployments: with more than MaxAll records it returns an error.
func (s *Store) All(ctx context.Context) ([]record.Completion, error) {
	w, err := s.kv.Watch(ctx, KVKeyPrefix+">", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("receipts: list: %w", err)
	}
	defer w.Stop()
	var out []record.Completion
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("receipts: list: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("receipts: list: watcher closed")
			}
			if e == nil { // initial values delivered
				sort.Slice(out, func(i, j int) bool { return out[i].EventID < out[j].EventID })
				return out, nil
			}
			if len(out) == record.MaxAll {
				return nil, fmt.Errorf("receipts: list: more than %d records", record.MaxAll)
			}
			c, err := record.DecodeCompletion(e.Value())
			if err != nil {
				return nil, fmt.Errorf("receipts: list: key %s: %w", e.Key(), err)
			}
			out = append(out, c)
		}
	}
}
