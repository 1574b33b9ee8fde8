package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leafline/leafline/completion/record"
	bolt "go.etcd.io/bbolt"
)

// posLen is the length of a list position: ts(8) h(8).
const posLen = 16

var listKinds = map[record.ListStatus]byte{
	record.ListPending: kindPending, record.ListOverdue: kindPending,
	record.ListDeadLettered: kindDead, record.ListExpired: kindExpired, record.ListConflict: kindConflict,
}

// List returns a page of records as Store.List does, in the
// order the events were published (origin unknown last), and the cursor
// of the next page ("" when there is none). A page reads Limit index
// entries and Limit records, whatever the number of events tracked; the
// index is exact, so every page is full but the last.
func (s *State) List(ctx context.Context, q record.ListQuery) ([]record.Completion, string, error) {
	if err := q.Validate(); err != nil {
		return nil, "", err
	}
	if err := s.notReady(); err != nil {
		return nil, "", err
	}
	f := fact{listKinds[q.Status], q.Site}
	var start []byte
	var after []byte
	if q.After != "" {
		pos, err := record.DecodeCursorKey(q.After, q.Status, q.Site)
		if err != nil || len(pos) != posLen {
			return nil, "", fmt.Errorf("%w: after: invalid cursor: not made by this state", record.ErrBadQuery)
		}
		after, start = pos, pos
	}
	now := s.cfg.Now()
	cutoff := overdueAt(now, s.cfg.OverdueAfter)
	overdue := q.Status == record.ListOverdue
	items := make([]record.Completion, 0, min(q.Limit, 128))
	var last, next []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIndex).Bucket(factName(f))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		in := func(k []byte) bool {
			return k != nil && (!overdue || binary.BigEndian.Uint64(k) <= cutoff)
		}
		k, _ := c.First()
		if start != nil {
			k, _ = c.Seek(start)
		}
		for ; in(k); k, _ = c.Next() {
			pos := k[:posLen]
			if after != nil && bytes.Equal(pos, after) {
				continue
			}
			if len(items) == q.Limit {
				next = last // there is more
				return nil
			}
			id := string(k[posLen:])
			rec, ok, err := getRecord(tx, id)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("completion: index entry without a record: %q", short(id))
			}
			rec.View(now, s.cfg.OverdueAfter)
			items = append(items, rec)
			last = slices.Clone(pos)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	if next == nil {
		return items, "", nil
	}
	return items, record.EncodeCursorKey(q.Status, q.Site, next), nil
}

// Summary counts events per status and per site as Store.Summary
// does, but exactly and from one snapshot: every count is kept in the
// transaction that changes the records. Overdue counts are kept up to a
// watermark that the folds move; Summary counts only the entries published
// between the watermark and now − OverdueAfter. Its cost is the number of
// sites, not of events. Truncated is never set.
func (s *State) Summary(ctx context.Context) (record.Summary, error) {
	if err := s.notReady(); err != nil {
		return record.Summary{}, err
	}
	now := s.cfg.Now().UTC()
	cutoff := overdueAt(now, s.cfg.OverdueAfter)
	sum := record.Summary{GeneratedAt: now, OverdueAfter: s.cfg.OverdueAfter.String()}
	err := s.db.View(func(tx *bolt.Tx) error {
		cnt, idx := tx.Bucket(bucketCounts), tx.Bucket(bucketIndex)
		get := func(kind byte, site string) int64 { return int64(getU64(cnt, []byte(countKey(kind, site)))) }
		w := getU64(cnt, []byte{kindMark})
		overdueOf := func(site string) int64 {
			n := get(kindOverdue, site)
			f := fact{kindPending, site}
			if cutoff >= w {
				return n + countBetween(idx, f, w, cutoff)
			}
			return n - countBetween(idx, f, cutoff, w)
		}
		sum.Events = get(kindEvents, "")
		sum.Pending, sum.DeadLettered, sum.Conflict = get(kindPending, ""), get(kindDead, ""), get(kindConflict, "")
		sum.Expired, sum.Retired = get(kindExpired, ""), get(kindRetired, "")
		sum.Complete = max(0, sum.Events-sum.Pending-sum.DeadLettered-sum.Expired-sum.Retired)
		sum.PendingOriginUnknown = get(kindUnknown, "")
		sum.Overdue = overdueOf("")
		sum.OldestPending = oldest(idx, "", now)
		for _, site := range s.sites(cnt) {
			sum.Sites = append(sum.Sites, record.SiteSummary{
				Site: site, Pending: get(kindPending, site), Overdue: overdueOf(site),
				DeadLettered: get(kindDead, site), Expired: get(kindExpired, site), Conflict: get(kindConflict, site),
				Retired:       get(kindRetired, site),
				OldestPending: oldest(idx, site, now),
			})
		}
		return nil
	})
	if err != nil {
		return record.Summary{}, err
	}
	if sum.Sites == nil {
		sum.Sites = []record.SiteSummary{}
	}
	return sum, nil
}

// sites are the configured sites and every site with a count, sorted, at
// most MaxSummarySites.
func (s *State) sites(cnt *bolt.Bucket) []string {
	set := map[string]bool{}
	for _, site := range s.cfg.Sites {
		set[site] = true
	}
	c := cnt.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) > 1 && (k[0] == kindPending || k[0] == kindDead || k[0] == kindExpired || k[0] == kindConflict || k[0] == kindRetired) {
			set[string(k[1:])] = true
		}
	}
	out := make([]string, 0, len(set))
	for site := range set {
		out = append(out, site)
	}
	slices.SortFunc(out, strings.Compare)
	return out[:min(len(out), record.MaxSummarySites)]
}

// oldest is the pending event of site ("" for any) published first.
func oldest(idx *bolt.Bucket, site string, now time.Time) *record.PendingAge {
	b := idx.Bucket(factName(fact{kindPending, site}))
	if b == nil {
		return nil
	}
	k, _ := b.Cursor().First()
	if k == nil {
		return nil
	}
	ts := binary.BigEndian.Uint64(k)
	if ts == unknownTS {
		return nil
	}
	at := time.Unix(0, int64(ts)).UTC()
	return &record.PendingAge{EventID: string(k[posLen:]), PublishedAt: at, AgeSeconds: now.Sub(at).Seconds()}
}

// HeldEvents returns up to limit records of status origin_unknown.
//
// It first folds what other boxes appended, so that it does not offer
// receipts for expiry that another box has released since.
func (s *State) HeldEvents(ctx context.Context, limit int) ([]record.Completion, error) {
	if err := s.notReady(); err != nil {
		return nil, err
	}
	if err := s.catchUp(ctx); err != nil {
		return nil, err
	}
	var out []record.Completion
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIndex).Bucket(factName(fact{kindPending, ""}))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, _ := c.Seek(binary.BigEndian.AppendUint64(nil, unknownTS)); k != nil && len(out) < limit; k, _ = c.Next() {
			rec, ok, err := getRecord(tx, string(k[posLen:]))
			if err != nil || !ok {
				continue // an unreadable record is not expired; Get reports it
			}
			if rec.Status == record.EventOriginUnknown {
				out = append(out, rec)
			}
		}
		return nil
	})
	return out, err
}
