package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leafline/leafline/completion/record"
	"golang.org/x/sync/errgroup"
)

// filterKey returns the index key kind and KV key filter that List scans.
func filterKey(q record.ListQuery) (idxKey, string) {
	kind := map[record.ListStatus]idxKind{
		record.ListPending: kindPending, record.ListOverdue: kindPending, record.ListDeadLettered: kindDead, record.ListExpired: kindExpired, record.ListConflict: kindConflict,
	}[q.Status]
	k := eventKey(kind)
	if q.Site != "" {
		k = siteKey(kind, q.Site)
	}
	return k, k.String() + ".>"
}

// List returns up to q.Limit completion records matching q, in index order
// (roughly the order in which events entered that state), and the cursor of
// the next page ("" when there is none).
//
// It reads at most MaxListScan index entries and q.Limit records, whatever
// the backlog: a page can hold fewer than Limit items and still return a
// cursor; stop when the cursor is empty. Every item is checked against its
// record, so it is never stale; index entries a crash left behind are
// skipped (and removed when they can never be true again). An entry
// rewritten while a client pages may appear on two pages.
//
// Errors: a bad query wraps ErrBadQuery; ErrNoIndex for a Store without an
// index; others are transient.
func (s *Store) List(ctx context.Context, q record.ListQuery) ([]record.Completion, string, error) {
	if err := q.Validate(); err != nil {
		return nil, "", err
	}
	if s.ix == nil {
		return nil, "", ErrNoIndex
	}
	seq := uint64(1)
	if q.After != "" {
		seq, _ = record.DecodeCursorSeq(q.After, q.Status, q.Site)
		seq = max(seq, 1) // a cursor of another State starts over
	}
	k, filter := filterKey(q)
	now := s.now()
	cutoff := now.Add(-s.overdueAfter)
	items := make([]record.Completion, 0, min(q.Limit, 128))
	scanned, exhausted := 0, false
	for len(items) < q.Limit && scanned < record.MaxListScan && !exhausted {
		want := q.Limit - len(items)
		fetch := want
		if q.Status == record.ListOverdue {
			fetch = 512
		}
		fetch = min(fetch, record.MaxListScan-scanned)
		ents, more, err := s.ix.batch(ctx, filter, seq, fetch)
		if err != nil {
			return nil, "", err
		}
		exhausted = !more
		// Keep the entries up to the want-th candidate: the rest stay for
		// the next page.
		var cands []int
		for i, e := range ents {
			if len(cands) == want {
				ents, exhausted = ents[:i], false
				break
			}
			if e.Key == "" {
				continue
			}
			if q.Status == record.ListOverdue {
				if p, ok := parsePublished(e.Value); !ok || p.After(cutoff) {
					continue
				}
			}
			cands = append(cands, i)
		}
		found, err := s.verify(ctx, k, q.Status == record.ListOverdue, ents, cands, now)
		if err != nil {
			return nil, "", err
		}
		for i, e := range ents {
			seq, scanned = e.Seq+1, scanned+1
			if found[i] != nil {
				items = append(items, *found[i])
			}
		}
		if len(ents) == 0 {
			exhausted = true
		}
	}
	if exhausted {
		return items, "", nil
	}
	return items, record.EncodeCursorSeq(q.Status, q.Site, seq), nil
}

// verify reads the records of ents[cands] in parallel and returns, per
// entry, the record if it really is in state k as of now.
func (s *Store) verify(ctx context.Context, k idxKey, overdue bool, ents []idxEntry, cands []int, now time.Time) ([]*record.Completion, error) {
	found := make([]*record.Completion, len(ents))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listVerifyParallel)
	for _, i := range cands {
		g.Go(func() error {
			ek, id, err := parseIndexKey(ents[i].Key)
			if err != nil || ek != k {
				return nil // not ours (written by hand); skip
			}
			c, _, _, err := s.get(gctx, id)
			if errors.Is(err, record.ErrNotFound) || errors.Is(err, record.ErrCorruptRecord) {
				return nil // an intent whose record is not written yet, or a record to repair
			}
			if err != nil {
				return err
			}
			c.View(now, s.overdueAfter)
			ok := member(&c, k)
			if ok && overdue {
				ok = c.OriginKnown() && !now.Before(c.PublishedAt.Add(s.overdueAfter))
			}
			if !ok {
				if permanentlyFalse(&c, k) {
					cctx, cancel := s.call(gctx)
					_ = s.ix.remove(cctx, ents[i].Key) // best effort read repair
					cancel()
				}
				return nil
			}
			found[i] = &c
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return found, nil
}

// Summary counts events per status and per site from the status index.
//
// Status counts are exact counts of index entries (one batched direct get
// each); Complete is Events − Pending − DeadLettered − Expired. Overdue, the oldest
// pending event and the set of sites come from scans bounded by
// MaxSummaryScan entries (see Truncated). Sites are StoreConfig.Sites plus
// every site that has index entries within the scans. Counts are read one
// after another, not as one snapshot, and may include index entries a crash
// left behind until List or a redelivered receipt removes them.
func (s *Store) Summary(ctx context.Context) (record.Summary, error) {
	if s.ix == nil {
		return record.Summary{}, ErrNoIndex
	}
	now := s.now().UTC()
	sum := record.Summary{GeneratedAt: now, OverdueAfter: s.overdueAfter.String()}
	if err := s.summaryCounts(ctx, &sum); err != nil {
		return record.Summary{}, err
	}
	if err := s.summaryPending(ctx, &sum, now); err != nil {
		return record.Summary{}, err
	}
	if err := s.summarySites(ctx, &sum, now); err != nil {
		return record.Summary{}, err
	}
	return sum, nil
}

// summaryCounts fills the event-level counts: exact counts of index
// entries, and Complete as the rest.
func (s *Store) summaryCounts(ctx context.Context, sum *record.Summary) error {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("receipts: summary: %w", err)
	}
	sum.Events = int64(st.Values())
	for _, c := range []struct {
		p      *int64
		filter string
	}{{&sum.Pending, "p.=.>"}, {&sum.DeadLettered, "d.=.>"}, {&sum.Expired, "x.=.>"}, {&sum.Conflict, "c.=.>"}} {
		if *c.p, err = s.ix.count(ctx, c.filter); err != nil {
			return err
		}
	}
	sum.Complete = max(0, sum.Events-sum.Pending-sum.DeadLettered-sum.Expired)
	return nil
}

// summaryPending scans the event-level pending entries: overdue, origin
// unknown, the oldest.
func (s *Store) summaryPending(ctx context.Context, sum *record.Summary, now time.Time) error {
	cutoff := now.Add(-s.overdueAfter)
	trunc, err := s.scan(ctx, "p.=.>", func(e idxEntry) {
		_, id, err := parseIndexKey(e.Key)
		if err != nil {
			return
		}
		p, ok := parsePublished(e.Value)
		if !ok {
			sum.PendingOriginUnknown++
			return
		}
		if !p.After(cutoff) {
			sum.Overdue++
		}
		sum.OldestPending = sum.OldestPending.Offer(id, p, now)
	})
	sum.Truncated = trunc
	return err
}

// summarySites finds the sites (configured, and those with index entries
// within the scans), their overdue and oldest pending events, and counts
// each site's entries exactly.
func (s *Store) summarySites(ctx context.Context, sum *record.Summary, now time.Time) error {
	cutoff := now.Add(-s.overdueAfter)
	sites := map[string]*record.SiteSummary{}
	site := func(name string) *record.SiteSummary {
		if r, ok := sites[name]; ok || len(sites) >= record.MaxSummarySites {
			return r
		}
		sites[name] = &record.SiteSummary{Site: name}
		return sites[name]
	}
	for _, name := range s.sites {
		site(name)
	}
	for _, filter := range []string{"p.*.>", "d.*.>", "x.*.>", "c.*.>"} {
		trunc, err := s.scan(ctx, filter, func(e idxEntry) {
			k, id, err := parseIndexKey(e.Key)
			if err != nil || k.site == eventLevel {
				return
			}
			r := site(k.site)
			if r == nil || k.kind != kindPending {
				return
			}
			if p, ok := parsePublished(e.Value); ok {
				if !p.After(cutoff) {
					r.Overdue++
				}
				r.OldestPending = r.OldestPending.Offer(id, p, now)
			}
		})
		if err != nil {
			return err
		}
		sum.Truncated = sum.Truncated || trunc
	}
	sum.Sites = make([]record.SiteSummary, 0, len(sites))
	for _, r := range sites {
		sum.Sites = append(sum.Sites, *r)
	}
	slices.SortFunc(sum.Sites, func(a, b record.SiteSummary) int { return strings.Compare(a.Site, b.Site) })
	return s.countSites(ctx, sum.Sites)
}

// countSites counts each site's pending, dead-lettered, expired and conflict
// entries, eight lookups at a time.
func (s *Store) countSites(ctx context.Context, sites []record.SiteSummary) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range sites {
		r := &sites[i]
		for _, c := range []struct {
			p    *int64
			kind idxKind
		}{{&r.Pending, kindPending}, {&r.DeadLettered, kindDead}, {&r.Expired, kindExpired}, {&r.Conflict, kindConflict}} {
			g.Go(func() error {
				n, err := s.ix.count(gctx, siteKey(c.kind, r.Site).String()+".>")
				*c.p = n
				return err
			})
		}
	}
	return g.Wait()
}

// scan calls fn for each live entry matching filter, in sequence order, up
// to MaxSummaryScan entries; it reports whether it stopped at that bound.
func (s *Store) scan(ctx context.Context, filter string, fn func(idxEntry)) (truncated bool, err error) {
	seq, n := uint64(1), 0
	for n < record.MaxSummaryScan {
		ents, more, err := s.ix.batch(ctx, filter, seq, min(1000, record.MaxSummaryScan-n))
		if err != nil {
			return false, err
		}
		for _, e := range ents {
			seq, n = e.Seq+1, n+1
			if e.Key != "" {
				fn(e)
			}
		}
		if !more || len(ents) == 0 {
			return false, nil
		}
	}
	return true, nil
}

// listVerifyParallel bounds the concurrent record reads of one List.
const listVerifyParallel = 16
