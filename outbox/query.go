package outbox

import (
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// Get returns the record stored under key. ok is false if there is none.
func (o *Outbox) Get(key string) (rec Record, ok bool, err error) {
	err = o.view(func(tx *bbolt.Tx) error {
		b, err := getBuckets(tx)
		if err != nil {
			return err
		}
		v := b.records.Get([]byte(key))
		if v == nil {
			return nil
		}
		r, err := b.load([]byte(key), v)
		if err != nil {
			return err
		}
		rec, ok = r.clone(), true
		return nil
	})
	if err != nil {
		return Record{}, false, fmt.Errorf("outbox: get: %w", err)
	}
	return rec, ok, nil
}

// Pending returns up to limit pending records, oldest (lowest Seq) first,
// whose CreatedAt is at or before createdBefore (zero time = no age filter).
// limit <= 0 means no limit.
//
// Younger records are skipped, not treated as the end: after a wall-clock
// step backwards a higher Seq can carry an older CreatedAt. The cost is a
// scan of the pending index up to limit matches.
func (o *Outbox) Pending(limit int, createdBefore time.Time) ([]Record, error) {
	var out []Record
	err := o.view(func(tx *bbolt.Tx) error {
		b, err := getBuckets(tx)
		if err != nil {
			return err
		}
		c := b.pending.Cursor()
		for k, v := c.First(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			r, err := pendingRecord(b, k, v)
			if err != nil {
				return err
			}
			if !createdBefore.IsZero() && r.CreatedAt.After(createdBefore) {
				continue
			}
			out = append(out, r.clone())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: pending: %w", err)
	}
	return out, nil
}

// pendingRecord resolves a pending index entry and checks that it agrees
// with its record. The record's Data aliases bbolt memory.
func pendingRecord(b buckets, k, v []byte) (Record, error) {
	if len(k) != 8 {
		return Record{}, fmt.Errorf("%w: pending index key %x has length %d", ErrCorrupt, k, len(k))
	}
	seq := binary.BigEndian.Uint64(k)
	rv := b.records.Get(v)
	if rv == nil {
		return Record{}, fmt.Errorf("%w: pending index seq %d points at missing record %q", ErrCorrupt, seq, v)
	}
	r, err := b.load(v, rv)
	if err != nil {
		return Record{}, err
	}
	if r.State != StatePending || r.Seq != seq {
		return Record{}, fmt.Errorf("%w: pending index seq %d points at record %q with seq %d, state %s", ErrCorrupt, seq, v, r.Seq, r.State)
	}
	return r, nil
}

// Stats are the outbox counters.
type Stats struct {
	Pending, Published int
	OldestPending      time.Time // CreatedAt of the lowest-Seq pending record; zero if none
}

// Stats returns the counters, kept in the meta bucket by every write, and
// the age of the oldest pending record: O(log n), cheap enough for every
// metrics scrape.
func (o *Outbox) Stats() (Stats, error) {
	var s Stats
	err := o.view(func(tx *bbolt.Tx) error {
		b, err := getBuckets(tx)
		if err != nil {
			return err
		}
		p, err := b.counter(metaPending)
		if err != nil {
			return err
		}
		d, err := b.counter(metaPublished)
		if err != nil {
			return err
		}
		s.Pending, s.Published = int(p), int(d)
		if k, v := b.pending.Cursor().First(); k != nil {
			r, err := pendingRecord(b, k, v)
			if err != nil {
				return err
			}
			s.OldestPending = r.CreatedAt
		}
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("outbox: stats: %w", err)
	}
	return s, nil
}
