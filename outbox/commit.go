package outbox

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// Commit runs fn (may be nil) and stores recs, in one managed bbolt Update
// transaction: one fsync for the whole batch.
//
// For each rec whose Key is already stored, the stored record is left
// untouched and its stored copy is returned, whatever its Subject and Data
// (compare them if that matters). Otherwise rec is stored as pending with a
// new Seq and CreatedAt. A Key repeated inside recs is stored once; later
// occurrences return the first. The returned slice is parallel to recs.
//
// fn runs first, in the same transaction, so that the edge's store sink
// writes its business record atomically with the receipt. If fn returns an
// error the transaction is rolled back (fn's own writes included), nothing
// is stored and the error is returned wrapped. fn must not call methods of
// the Outbox and must not commit or roll back tx. A panic in fn rolls the
// transaction back and propagates unchanged.
//
// Invalid records (see ErrInvalidRecord) are rejected before the
// transaction starts; fn is not called.
//
// NOTE: any other error (a failed fsync, a full disk, ErrCorrupt) is fatal:
// the caller must not ACK anything covered by this call and should stop the
// process. bbolt does not retry a failed commit in place and the state of
// the page cache after a failed fsync is unknown, so every later write on
// this Outbox returns an error wrapping the first one. Reads still work.
func (o *Outbox) Commit(recs []Record, fn func(tx *bbolt.Tx) error) ([]Record, error) {
	return o.CommitMark(recs, nil, fn)
}

// CommitMark is Commit and MarkPublished in one transaction (one commit,
// its fsyncs shared): first it marks the records of published published,
// then it runs fn and stores recs. published are records as Commit
// returned them: a record whose Seq is still pending under its Key is
// marked without a lookup by Key; any other is looked up by Key, as
// MarkPublished does. A record of recs whose Key is marked here is
// returned published. If fn fails, nothing is stored and nothing marked.
// Errors are fatal, as for Commit.
//
// The edge's runner marks the batches PubAck'ed meanwhile in the commit of
// the next batch, where each mark used to cost a transaction of its own.
func (o *Outbox) CommitMark(recs []Record, published []Record, fn func(tx *bbolt.Tx) error) ([]Record, error) {
	for i := range recs {
		if err := recs[i].validate(); err != nil {
			return nil, fmt.Errorf("outbox: commit: record %d: %w", i, err)
		}
	}
	out := make([]Record, len(recs))
	if len(recs) == 0 && len(published) == 0 && fn == nil {
		return out, o.usable()
	}
	created := normalTime(o.now())
	inCallback := false
	err := o.update(&inCallback, func(tx *bbolt.Tx) error {
		b, err := getBuckets(tx)
		if err != nil {
			return err
		}
		if err := b.mark(published, created); err != nil {
			return err
		}
		if fn != nil {
			inCallback = true
			err := fn(tx)
			inCallback = false
			if err != nil {
				return &callbackError{err}
			}
		}
		first := make(map[string]int, len(recs))
		added := int64(0)
		for i := range recs {
			key := recs[i].Key
			if j, ok := first[key]; ok {
				out[i] = out[j]
				continue
			}
			first[key] = i
			if v := b.records.Get([]byte(key)); v != nil {
				r, err := b.load([]byte(key), v)
				if err != nil {
					return err
				}
				out[i] = r.clone()
				continue
			}
			seq, err := b.records.NextSequence()
			if err != nil {
				return err
			}
			r := Record{
				Key:       key,
				Subject:   recs[i].Subject,
				Data:      recs[i].Data,
				Seq:       seq,
				State:     StatePending,
				CreatedAt: created,
			}
			if len(r.Data) == 0 {
				r.Data = nil
			}
			if err := b.records.Put([]byte(key), encodeRecord(&r)); err != nil {
				return err
			}
			if err := b.pending.Put(u64(seq), []byte(key)); err != nil {
				return err
			}
			out[i] = r
			added++
		}
		return b.addCounters(added, 0)
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: commit: %w", err)
	}
	return out, nil
}

// MarkPublished marks the records with the given keys published, in one
// Update transaction. Unknown keys are ignored (a record may have been
// pruned) and records already published are left untouched.
//
// NOTE: an error is fatal, as for Commit. The caller must not ACK the
// source messages; the records stay pending and the Relay republishes them
// after a restart.
func (o *Outbox) MarkPublished(keys []string) error {
	if len(keys) == 0 {
		return o.usable()
	}
	now := normalTime(o.now())
	marks := make([]Record, len(keys))
	for i, k := range keys {
		marks[i].Key = k
	}
	err := o.update(nil, func(tx *bbolt.Tx) error {
		b, err := getBuckets(tx)
		if err != nil {
			return err
		}
		return b.mark(marks, now)
	})
	if err != nil {
		return fmt.Errorf("outbox: mark published: %w", err)
	}
	return nil
}

// mark marks the pending records of marks (by Key; Seq, when not zero,
// spares the lookup by Key) published at now.
func (b buckets) mark(marks []Record, now time.Time) error {
	n := int64(0)
	for _, m := range marks {
		k := []byte(m.Key)
		r := Record{Key: m.Key, Seq: m.Seq}
		// The pending index names the pending record of each Seq: if it
		// names this Key, the record is pending and needs no lookup in
		// the records (random keys: a page read each).
		if m.Seq == 0 || !bytes.Equal(b.pending.Get(u64(m.Seq)), k) {
			v := b.records.Get(k)
			if v == nil {
				continue
			}
			var err error
			if r, err = b.load(k, v); err != nil {
				return err
			}
			if r.State == StatePublished {
				continue
			}
			if got := b.pending.Get(u64(r.Seq)); !bytes.Equal(got, k) {
				return fmt.Errorf("%w: pending record %q (seq %d) has no pending index entry", ErrCorrupt, m.Key, r.Seq)
			}
		}
		if err := b.pending.Delete(u64(r.Seq)); err != nil {
			return err
		}
		// The record itself is not rewritten: its Seq-keyed mark and
		// index entries land on the few pages at the end of their trees,
		// where rewriting records keyed by random receipt keys dirtied a
		// page per record.
		r.State, r.PublishedAt = StatePublished, now
		if err := b.marks.Put(u64(r.Seq), u64(uint64(timeToNanos(now)))); err != nil {
			return err
		}
		if err := b.published.Put(publishedKey(&r), k); err != nil {
			return err
		}
		n++
	}
	return b.addCounters(-n, n)
}

// Prune deletes up to limit published records whose PublishedAt is before
// publishedBefore, oldest first, in one Update transaction, and returns how
// many it deleted. limit <= 0 means no limit. Pending records are never
// deleted.
//
// NOTE: once a record is pruned its Key can be committed again (see the
// package Caveats). Keep publishedBefore well behind the source streams'
// redelivery horizon. An error is fatal, as for Commit.
func (o *Outbox) Prune(publishedBefore time.Time, limit int) (int, error) {
	before := timeToNanos(publishedBefore)
	deleted := 0
	err := o.update(nil, func(tx *bbolt.Tx) error {
		b, err := getBuckets(tx)
		if err != nil {
			return err
		}
		type entry struct{ idx, key []byte }
		var victims []entry
		c := b.published.Cursor()
		for k, v := c.First(); k != nil && (limit <= 0 || len(victims) < limit); k, v = c.Next() {
			if len(k) != 16 {
				return fmt.Errorf("%w: published index key %x has length %d", ErrCorrupt, k, len(k))
			}
			if int64(binary.BigEndian.Uint64(k)) >= before {
				break
			}
			victims = append(victims, entry{bytes.Clone(k), bytes.Clone(v)})
		}
		for _, e := range victims {
			v := b.records.Get(e.key)
			if v == nil {
				return fmt.Errorf("%w: published index entry %x points at missing record %q", ErrCorrupt, e.idx, e.key)
			}
			r, err := b.load(e.key, v)
			if err != nil {
				return err
			}
			if r.State != StatePublished || !bytes.Equal(publishedKey(&r), e.idx) {
				return fmt.Errorf("%w: published index entry %x does not match record %q", ErrCorrupt, e.idx, e.key)
			}
			if err := b.records.Delete(e.key); err != nil {
				return err
			}
			if err := b.marks.Delete(u64(r.Seq)); err != nil {
				return err
			}
			if err := b.published.Delete(e.idx); err != nil {
				return err
			}
		}
		deleted = len(victims)
		return b.addCounters(0, -int64(len(victims)))
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: prune: %w", err)
	}
	return deleted, nil
}
