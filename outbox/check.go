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

// checkInvariants checks the outbox invariants (step 3 of Check) and
// returns what it finds, stopping once maxProblems are found: the
// records, then the pending index, the published index and the marks
// against them, then the counters.
func checkInvariants(tx *bbolt.Tx) []string {
	if err := checkLayout(tx); err != nil {
		return []string{fmt.Sprintf("%v", err)}
	}
	b, _ := getBuckets(tx)
	c := &invariantCheck{b: b, maxSeq: b.records.Sequence(), seqs: make(map[uint64]string)}
	if c.records() && c.pendingIndex() && c.publishedIndex() && c.marks() {
		c.counters()
	}
	return c.problems
}

// invariantCheck holds what checkInvariants has seen so far.
type invariantCheck struct {
	b        buckets
	problems []string
	// maxSeq is the records bucket's sequence, which no Seq may exceed.
	maxSeq uint64
	// seqs maps each record's Seq to its key.
	seqs map[uint64]string
	// pending and published count the records in each state.
	pending, published uint64
	// nPending and nPublished count the entries of each index.
	nPending, nPublished uint64
}

// add records a problem and reports whether the check goes on: whether
// fewer than maxProblems are recorded.
func (c *invariantCheck) add(format string, args ...any) bool {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
	return len(c.problems) < maxProblems
}

// records checks every record (see record) and reports whether the check
// goes on.
func (c *invariantCheck) records() bool {
	cur := c.b.records.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if v == nil {
			if !c.add("records: %q is a bucket", k) {
				return false
			}
			continue
		}
		r, err := c.b.load(k, v)
		if err != nil {
			if !c.add("%v", err) {
				return false
			}
			continue
		}
		if !c.record(k, &r) {
			return false
		}
	}
	return true
}

// record checks one decoded record, stored under k: its Seq is unique and
// within the bucket sequence, and its state agrees with its PublishedAt
// and with its index entry. It reports whether the check goes on.
func (c *invariantCheck) record(k []byte, r *Record) bool {
	ok := true
	if other, dup := c.seqs[r.Seq]; dup {
		ok = c.add("records %q and %q share seq %d", other, k, r.Seq)
	}
	c.seqs[r.Seq] = r.Key
	if r.Seq == 0 || r.Seq > c.maxSeq {
		ok = ok && c.add("record %q: seq %d outside (0, %d]", k, r.Seq, c.maxSeq)
	}
	switch r.State {
	case StatePending:
		c.pending++
		if !r.PublishedAt.IsZero() {
			ok = ok && c.add("pending record %q has a PublishedAt", k)
		}
		if !bytes.Equal(c.b.pending.Get(u64(r.Seq)), k) {
			ok = ok && c.add("pending record %q (seq %d) has no pending index entry", k, r.Seq)
		}
	case StatePublished:
		c.published++
		if r.PublishedAt.IsZero() {
			ok = ok && c.add("published record %q has no PublishedAt", k)
		}
		if !bytes.Equal(c.b.published.Get(publishedKey(r)), k) {
			ok = ok && c.add("published record %q (seq %d) has no published index entry", k, r.Seq)
		}
	}
	return ok
}

// pendingIndex checks that every pending index entry points at a pending
// record with its Seq, and reports whether the check goes on.
func (c *invariantCheck) pendingIndex() bool {
	cur := c.b.pending.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		c.nPending++
		if _, err := pendingRecord(c.b, k, v); err != nil && !c.add("%v", err) {
			return false
		}
	}
	return true
}

// publishedIndex checks that every published index entry points at a
// published record whose index key it is, and reports whether the check
// goes on.
func (c *invariantCheck) publishedIndex() bool {
	cur := c.b.published.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		c.nPublished++
		rv := c.b.records.Get(v)
		if rv == nil {
			if !c.add("published index entry %x points at missing record %q", k, v) {
				return false
			}
			continue
		}
		r, err := c.b.load(v, rv)
		if err == nil && (r.State != StatePublished || !bytes.Equal(publishedKey(&r), k)) {
			err = fmt.Errorf("published index entry %x does not match record %q", k, v)
		}
		if err != nil && !c.add("%v", err) {
			return false
		}
	}
	return true
}

// marks checks that every mark is well formed and belongs to a record,
// and reports whether the check goes on.
func (c *invariantCheck) marks() bool {
	cur := c.b.marks.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if len(k) != 8 || len(v) != 8 {
			if !c.add("mark %x has a malformed key or value", k) {
				return false
			}
			continue
		}
		if _, ok := c.seqs[binary.BigEndian.Uint64(k)]; !ok && !c.add("mark of seq %d has no record", binary.BigEndian.Uint64(k)) {
			return false
		}
	}
	return true
}

// counters checks the stored pending and published counters against the
// records and index entries counted.
func (c *invariantCheck) counters() {
	cp, _ := c.b.counter(metaPending)
	cd, _ := c.b.counter(metaPublished)
	if cp != c.pending || c.nPending != c.pending {
		c.add("pending: counter %d, records %d, index entries %d", cp, c.pending, c.nPending)
	}
	if cd != c.published || c.nPublished != c.published {
		c.add("published: counter %d, records %d, index entries %d", cd, c.published, c.nPublished)
	}
}
