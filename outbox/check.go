package outbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/bbolt"
)

// Check verifies the whole file and returns an error wrapping ErrCorrupt,
// naming the file and listing what is wrong (up to 20 problems), if
// anything is. It runs, in order, stopping at the first step that finds a
// problem:
//
//  1. the structural walk Open does (meta pages, truncation, every
//     reachable page, freelist), which makes step 2 safe;
//  2. bbolt's own consistency check (tx.Check), over all buckets, the
//     store sink's included;
//  3. the outbox invariants: every record decodes and its checksum
//     matches; every pending record has exactly the pending index entry
//     for its Seq and every pending index entry points at such a record;
//     the same for published records and the published index; every
//     mark belongs to a record; Seqs are unique and not above the bucket
//     sequence; the counters match.
//
// Check holds bbolt's writer lock while it runs (tx.Check is only safe
// against concurrent writers inside a writable transaction), so Commit
// waits; it writes nothing. Its cost is a read of the whole file: run it at
// startup and from operator tooling, not on a hot path.
func (o *Outbox) Check() error {
	if err := o.usable(); err != nil {
		return err
	}
	errDone := errors.New("check done")
	var problems []string
	err := guard(nil, func() error {
		return o.db.Update(func(tx *bbolt.Tx) error {
			p, err := checkFile(o.file)
			if err != nil {
				return err
			}
			if problems = p; len(problems) > 0 {
				return errDone
			}
			for err := range tx.Check() { // drain: the checker goroutine blocks otherwise
				if len(problems) < maxProblems {
					problems = append(problems, "bbolt: "+err.Error())
				}
			}
			if len(problems) > 0 {
				return errDone
			}
			problems = checkInvariants(tx)
			return errDone
		})
	})
	// The check read the whole file through the memory map: do not leave
	// it all resident.
	_ = o.ReleaseMapped()
	if err != nil && !errors.Is(err, errDone) {
		return fmt.Errorf("outbox: check: %w", o.mapErr(err))
	}
	if len(problems) > 0 {
		return fmt.Errorf("outbox: check: %w", corruptError(o.path, problems))
	}
	return nil
}

func checkInvariants(tx *bbolt.Tx) []string {
	var problems []string
	add := func(format string, args ...any) bool {
		problems = append(problems, fmt.Sprintf(format, args...))
		return len(problems) < maxProblems
	}
	if err := checkLayout(tx); err != nil {
		add("%v", err)
		return problems
	}
	b, _ := getBuckets(tx)

	var pending, published uint64
	maxSeq := b.records.Sequence()
	seqs := make(map[uint64]string)
	c := b.records.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			if !add("records: %q is a bucket", k) {
				return problems
			}
			continue
		}
		r, err := b.load(k, v)
		if err != nil {
			if !add("%v", err) {
				return problems
			}
			continue
		}
		ok := true
		if other, dup := seqs[r.Seq]; dup {
			ok = add("records %q and %q share seq %d", other, k, r.Seq)
		}
		seqs[r.Seq] = r.Key
		if r.Seq == 0 || r.Seq > maxSeq {
			ok = ok && add("record %q: seq %d outside (0, %d]", k, r.Seq, maxSeq)
		}
		switch r.State {
		case StatePending:
			pending++
			if !r.PublishedAt.IsZero() {
				ok = ok && add("pending record %q has a PublishedAt", k)
			}
			if !bytes.Equal(b.pending.Get(u64(r.Seq)), k) {
				ok = ok && add("pending record %q (seq %d) has no pending index entry", k, r.Seq)
			}
		case StatePublished:
			published++
			if r.PublishedAt.IsZero() {
				ok = ok && add("published record %q has no PublishedAt", k)
			}
			if !bytes.Equal(b.published.Get(publishedKey(&r)), k) {
				ok = ok && add("published record %q (seq %d) has no published index entry", k, r.Seq)
			}
		}
		if !ok {
			return problems
		}
	}

	var nPending, nPublished uint64
	c = b.pending.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		nPending++
		if _, err := pendingRecord(b, k, v); err != nil && !add("%v", err) {
			return problems
		}
	}
	c = b.published.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		nPublished++
		rv := b.records.Get(v)
		if rv == nil {
			if !add("published index entry %x points at missing record %q", k, v) {
				return problems
			}
			continue
		}
		r, err := b.load(v, rv)
		if err == nil && (r.State != StatePublished || !bytes.Equal(publishedKey(&r), k)) {
			err = fmt.Errorf("published index entry %x does not match record %q", k, v)
		}
		if err != nil && !add("%v", err) {
			return problems
		}
	}

	c = b.marks.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 || len(v) != 8 {
			if !add("mark %x has a malformed key or value", k) {
				return problems
			}
			continue
		}
		if _, ok := seqs[binary.BigEndian.Uint64(k)]; !ok && !add("mark of seq %d has no record", binary.BigEndian.Uint64(k)) {
			return problems
		}
	}

	cp, _ := b.counter(metaPending)
	cd, _ := b.counter(metaPublished)
	if cp != pending || nPending != pending {
		add("pending: counter %d, records %d, index entries %d", cp, pending, nPending)
	}
	if cd != published || nPublished != published {
		add("published: counter %d, records %d, index entries %d", cd, published, nPublished)
	}
	return problems
}
