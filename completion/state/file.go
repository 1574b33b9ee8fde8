package state

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	bolt "go.etcd.io/bbolt"
)

// The local file's layout. Every bucket is derived from the records
// bucket, and all of them change in the transaction that folds a log
// entry, together with the checkpoint: the file is always the fold of the
// log up to its checkpoint, never half of an entry.
//
//	meta     checkpoint → the log sequence folded (8 bytes, big endian)
//	         log        → the log stream's identity (its creation time)
//	         layout     → fileLayout
//	records  event_id → the record, JSON as receipts encodes it
//	index    kind site → a bucket of ts(8) h(8) event_id → nothing
//	counts   kind site → count (8 bytes)
//
// An index bucket holds one fact of events: kind 'p' pending, 'd'
// dead-lettered, 'c' conflict, of the event (site "") or one processor.
// A bucket per fact keeps each fact's entries in a B+tree of their own,
// where new entries (recent events) append at its end.
// ts is the event's published_at in Unix nanoseconds (math.MaxUint64
// while its origin is unknown), so each fact's entries sort by the time
// the event was published and "overdue" is the head of a range; h is a
// hash of the event_id, which makes the 16 bytes ts h a short cursor.
// counts holds per kind and site how many index entries there are, and
// also:
//
//	'e' ""     records
//	'u' ""     pending events whose origin is unknown
//	'o' site   pending entries with ts ≤ the overdue watermark
//	'w' ""     the overdue watermark (Unix nanoseconds)
var (
	bucketMeta    = []byte("meta")
	bucketRecords = []byte("records")
	bucketIndex   = []byte("index")
	bucketCounts  = []byte("counts")

	keyCheckpoint = []byte("checkpoint")
	keyLog        = []byte("log")
	keyLayout     = []byte("layout")
)

// fileLayout is the layout version this package writes and reads.
const fileLayout = "1"

const (
	kindPending  = 'p'
	kindDead     = 'd'
	kindConflict = 'c'
	kindExpired  = 'x'
	kindRetired  = 'r'
	kindEvents   = 'e'
	kindUnknown  = 'u'
	kindOverdue  = 'o'
	kindMark     = 'w'
)

// unknownTS is the ts of an event whose origin is unknown: after every
// real time, so never overdue.
const unknownTS = math.MaxUint64

func openFile(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketRecords, bucketIndex, bucketCounts} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		switch v := m.Get(keyLayout); {
		case v == nil:
			return m.Put(keyLayout, []byte(fileLayout))
		case string(v) != fileLayout:
			return fmt.Errorf("%w: layout %q, this release reads %q", ErrBadFile, v, fileLayout)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// resetFile empties every bucket (the checkpoint goes with meta).
func resetFile(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketRecords, bucketIndex, bucketCounts} {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyLayout, []byte(fileLayout))
	})
}

func readCheckpoint(db *bolt.DB) uint64 {
	var seq uint64
	_ = db.View(func(tx *bolt.Tx) error {
		seq = getU64(tx.Bucket(bucketMeta), keyCheckpoint)
		return nil
	})
	return seq
}

func readLogIdentity(db *bolt.DB) (string, error) {
	var id string
	err := db.View(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(keyLog))
		return nil
	})
	return id, err
}

func writeLogIdentity(db *bolt.DB, id string) error {
	return db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyLog, []byte(id)) })
}

func getU64(b *bolt.Bucket, k []byte) uint64 {
	if v := b.Get(k); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// getRecord reads the record of id in tx.
func getRecord(tx *bolt.Tx, id string) (record.Completion, bool, error) {
	v := tx.Bucket(bucketRecords).Get([]byte(id))
	if v == nil {
		return record.Completion{}, false, nil
	}
	c, err := record.DecodeCompletion(v)
	if err != nil {
		return record.Completion{}, false, fmt.Errorf("completion: record of %q: %w", short(id), err)
	}
	return c, true, nil
}

// fact is one index entry's kind and site of an event.
type fact struct {
	kind byte
	site string
}

// factsOf lists the facts of a derived record c: the same as the KV
// index's entries (the KV layout's indexKeys).
func factsOf(c *record.Completion) []fact {
	if c == nil {
		return nil
	}
	var out []fact
	switch c.Status {
	case record.EventPending, record.EventOriginUnknown:
		out = append(out, fact{kindPending, ""})
	case record.EventDeadLettered:
		out = append(out, fact{kindDead, ""})
	case record.EventExpired:
		out = append(out, fact{kindExpired, ""})
	case record.EventRetired:
		out = append(out, fact{kindRetired, ""})
	}
	if c.Conflict {
		out = append(out, fact{kindConflict, ""})
	}
	for _, p := range c.MissingProcessors() {
		out = append(out, fact{kindPending, p})
	}
	for name, p := range c.Processors {
		if p.Status == receipt.StatusDeadLettered {
			out = append(out, fact{kindDead, name})
		}
		if p.Status == receipt.StatusExpired {
			out = append(out, fact{kindExpired, name})
		}
		if p.Status == record.StatusRetired {
			out = append(out, fact{kindRetired, name})
		}
		if p.Conflicts > 0 {
			out = append(out, fact{kindConflict, name})
		}
	}
	return out
}

// tsOf is c's index time: published_at, or unknownTS.
func tsOf(c *record.Completion) uint64 {
	if c == nil || !c.OriginKnown() {
		return unknownTS
	}
	return uint64(max(0, c.PublishedAt.UnixNano()))
}

// unknownPending reports whether c counts in PendingOriginUnknown.
func unknownPending(c *record.Completion) bool {
	return c != nil && !c.OriginKnown() && (c.Status == record.EventPending || c.Status == record.EventOriginUnknown)
}

func idHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// factName names the index bucket of one fact: kind site.
func factName(f fact) []byte {
	return append([]byte{f.kind}, f.site...)
}

// factBucket returns the index bucket of f, creating it with create; nil
// when it does not exist (no entries yet).
func factBucket(idx *bolt.Bucket, f fact, create bool) (*bolt.Bucket, error) {
	if !create {
		return idx.Bucket(factName(f)), nil
	}
	return idx.CreateBucketIfNotExists(factName(f))
}

// entryKey is the key of event id's entry at ts in a fact's bucket.
func entryKey(ts uint64, id string) []byte {
	k := make([]byte, 0, posLen+len(id))
	k = binary.BigEndian.AppendUint64(k, ts)
	k = binary.BigEndian.AppendUint64(k, idHash(id))
	return append(k, id...)
}

// countKey is the counts key of kind and site.
func countKey(kind byte, site string) string { return string(kind) + site }

// change is one record's change in one fold: from old (nil: absent) to
// new (nil: removed), raw being new as stored.
type change struct {
	id       string
	old, new *record.Completion
	raw      []byte
}

// fold writes changes into tx and moves the checkpoint to seq. The
// overdue watermark moves to mark (see overdueAt) in the same transaction.
func fold(tx *bolt.Tx, seq uint64, changes []change, mark uint64) error {
	recs, idx, cnt := tx.Bucket(bucketRecords), tx.Bucket(bucketIndex), tx.Bucket(bucketCounts)
	w := getU64(cnt, []byte{kindMark})
	deltas := map[fact]int64{}
	fb := factBuckets{idx: idx, open: map[fact]*bolt.Bucket{}}
	for _, ch := range changes {
		if err := foldOne(recs, &fb, ch, w, deltas); err != nil {
			return err
		}
	}
	if err := applyDeltas(cnt, deltas); err != nil {
		return err
	}
	// The index and counts hold the changes now: move the watermark over
	// them (every site with pending entries, new ones included).
	if mark != w {
		moved := map[fact]int64{}
		if err := moveMark(idx, cnt, w, mark, moved); err != nil {
			return err
		}
		if err := applyDeltas(cnt, moved); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(keyCheckpoint, u64(seq))
}

// applyDeltas adds deltas to the counts; a count that reaches zero goes.
func applyDeltas(cnt *bolt.Bucket, deltas map[fact]int64) error {
	for f, d := range deltas {
		if d == 0 {
			continue
		}
		k := []byte(countKey(f.kind, f.site))
		n := int64(getU64(cnt, k)) + d
		var err error
		if n <= 0 {
			err = cnt.Delete(k)
		} else {
			err = cnt.Put(k, u64(uint64(n)))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// factBuckets opens each fact's index bucket once per transaction.
type factBuckets struct {
	idx  *bolt.Bucket
	open map[fact]*bolt.Bucket
}

func (fb *factBuckets) get(f fact, create bool) (*bolt.Bucket, error) {
	if b := fb.open[f]; b != nil {
		return b, nil
	}
	b, err := factBucket(fb.idx, f, create)
	if b != nil {
		fb.open[f] = b
	}
	return b, err
}

func foldOne(recs *bolt.Bucket, fb *factBuckets, ch change, w uint64, deltas map[fact]int64) error {
	oldF, newF := factsOf(ch.old), factsOf(ch.new)
	oldTS, newTS := tsOf(ch.old), tsOf(ch.new)
	for _, f := range oldF {
		if oldTS == newTS && slices.Contains(newF, f) {
			continue
		}
		b, err := fb.get(f, false)
		if err != nil {
			return err
		}
		if b != nil {
			if err := b.Delete(entryKey(oldTS, ch.id)); err != nil {
				return err
			}
		}
		deltas[f]--
		if f.kind == kindPending && oldTS <= w {
			deltas[fact{kindOverdue, f.site}]--
		}
	}
	for _, f := range newF {
		if oldTS == newTS && slices.Contains(oldF, f) {
			continue
		}
		b, err := fb.get(f, true)
		if err != nil {
			return err
		}
		if err := b.Put(entryKey(newTS, ch.id), nil); err != nil {
			return err
		}
		deltas[f]++
		if f.kind == kindPending && newTS <= w {
			deltas[fact{kindOverdue, f.site}]++
		}
	}
	switch {
	case ch.old == nil && ch.new != nil:
		deltas[fact{kindEvents, ""}]++
	case ch.old != nil && ch.new == nil:
		deltas[fact{kindEvents, ""}]--
	}
	if unknownPending(ch.old) {
		deltas[fact{kindUnknown, ""}]--
	}
	if unknownPending(ch.new) {
		deltas[fact{kindUnknown, ""}]++
	}
	if ch.new == nil {
		return recs.Delete([]byte(ch.id))
	}
	return recs.Put([]byte(ch.id), ch.raw)
}

// moveMark moves the overdue watermark from w to mark, counting the
// pending entries of every fact whose ts it passes.
func moveMark(idx, cnt *bolt.Bucket, w, mark uint64, deltas map[fact]int64) error {
	sites := pendingSites(cnt)
	for _, site := range sites {
		n := countBetween(idx, fact{kindPending, site}, min(w, mark), max(w, mark))
		if mark < w {
			n = -n
		}
		deltas[fact{kindOverdue, site}] += n
	}
	return cnt.Put([]byte{kindMark}, u64(mark))
}

// pendingSites lists "" and every site with pending entries.
func pendingSites(cnt *bolt.Bucket) []string {
	sites := []string{""}
	c := cnt.Cursor()
	for k, _ := c.Seek([]byte{kindPending}); k != nil && k[0] == kindPending; k, _ = c.Next() {
		if len(k) > 1 {
			sites = append(sites, string(k[1:]))
		}
	}
	return sites
}

// countBetween counts the entries of f with lo < ts ≤ hi.
func countBetween(idx *bolt.Bucket, f fact, lo, hi uint64) int64 {
	b := idx.Bucket(factName(f))
	if b == nil {
		return 0
	}
	c := b.Cursor()
	var n int64
	for k, _ := c.Seek(binary.BigEndian.AppendUint64(nil, lo+1)); k != nil; k, _ = c.Next() {
		if binary.BigEndian.Uint64(k) > hi {
			break
		}
		n++
	}
	return n
}

// overdueAt is the watermark for now: entries published at or before it
// are overdue.
func overdueAt(now time.Time, after time.Duration) uint64 {
	return uint64(max(0, now.Add(-after).UnixNano()))
}
