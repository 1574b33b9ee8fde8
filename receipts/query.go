package receipts

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// ListStatus selects what List returns.
type ListStatus string

// List selections.
const (
	// ListPending: events whose status is pending or origin_unknown (with
	// Site: events the site has not reported yet, whatever their overall
	// status).
	ListPending ListStatus = "pending"
	// ListOverdue: pending events published at least OverdueAfter ago
	// (with Site: that site has not reported one published that long ago).
	ListOverdue ListStatus = "overdue"
	// ListDeadLettered: events with a dead_lettered receipt (with Site:
	// from that site).
	ListDeadLettered ListStatus = "dead_lettered"
	// ListConflict: events with a conflicting receipt (with Site: from
	// that site).
	ListConflict ListStatus = "conflict"
)

// Bounds of List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// MaxListScan bounds the index entries one List call reads, so a page
	// costs the same whatever the backlog; a page may then hold fewer than
	// Limit items and still have a next cursor.
	MaxListScan = 10_000
	// MaxCursorLen bounds the cursor string List accepts.
	MaxCursorLen = 256
	// MaxSummaryScan bounds the index entries each scan of Summary reads
	// (overdue counts, oldest pending, site discovery).
	MaxSummaryScan = 100_000
	// MaxSummarySites bounds the per-site rows of a Summary.
	MaxSummarySites = 1000
	// listVerifyParallel bounds the concurrent record reads of one List.
	listVerifyParallel = 16
)

// ListQuery selects a page of List.
type ListQuery struct {
	// Status is required.
	Status ListStatus `json:"status"`
	// Site optionally restricts the list to one site (processor name).
	Site string `json:"site,omitempty"`
	// Limit is 1..MaxListLimit; zero = DefaultListLimit.
	Limit int `json:"limit,omitempty"`
	// After is the cursor returned with the previous page; empty = start.
	After string `json:"after,omitempty"`
}

// Validate fills a zero Limit and checks every field, reporting all
// problems wrapped in ErrBadQuery.
func (q *ListQuery) Validate() error {
	var errs []error
	switch q.Status {
	case ListPending, ListOverdue, ListDeadLettered, ListConflict:
	case "":
		errs = append(errs, errors.New("status: required (pending, overdue, dead_lettered or conflict)"))
	default:
		errs = append(errs, fmt.Errorf("status: %q is not pending, overdue, dead_lettered or conflict", truncateUTF8(string(q.Status), 32)))
	}
	if q.Site != "" {
		if err := validateName(q.Site); err != nil {
			errs = append(errs, fmt.Errorf("site: %w", err))
		}
	}
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	if q.Limit < 1 || q.Limit > MaxListLimit {
		errs = append(errs, fmt.Errorf("limit: must be 1..%d, got %d", MaxListLimit, q.Limit))
	}
	if q.After != "" && len(errs) == 0 {
		if _, err := decodeCursor(q.After, q.Status, q.Site); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrBadQuery, errors.Join(errs...))
}

// ParseListQuery reads a ListQuery from URL query parameters status, site,
// limit and after. Unknown, repeated or empty-valued parameters, a limit that
// is not a decimal integer, and a query over 4 KiB are errors wrapping
// ErrBadQuery. The result is validated.
func ParseListQuery(v url.Values) (ListQuery, error) {
	var q ListQuery
	var errs []error
	size := 0
	for key, vals := range v {
		size += len(key)
		for _, s := range vals {
			size += len(s)
		}
		switch {
		case key != "status" && key != "site" && key != "limit" && key != "after":
			errs = append(errs, fmt.Errorf("unknown parameter %q", truncateUTF8(key, 32)))
		case len(vals) != 1:
			errs = append(errs, fmt.Errorf("%s: given %d times", key, len(vals)))
		case vals[0] == "":
			errs = append(errs, fmt.Errorf("%s: empty", key))
		}
	}
	if size > 4096 {
		return ListQuery{}, fmt.Errorf("%w: query parameters too long (%d bytes, limit 4096)", ErrBadQuery, size)
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return ListQuery{}, fmt.Errorf("%w: %w", ErrBadQuery, errors.Join(errs...))
	}
	q.Status, q.Site, q.After = ListStatus(v.Get("status")), v.Get("site"), v.Get("after")
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || len(s) > 6 || s[0] == '+' || s[0] == '-' {
			return ListQuery{}, fmt.Errorf("%w: limit: must be an integer 1..%d", ErrBadQuery, MaxListLimit)
		}
		if n == 0 {
			return ListQuery{}, fmt.Errorf("%w: limit: must be 1..%d, got 0", ErrBadQuery, MaxListLimit)
		}
		q.Limit = n
	}
	if err := q.Validate(); err != nil {
		return ListQuery{}, err
	}
	return q, nil
}

// Encode returns q as URL query parameters (the inverse of ParseListQuery).
func (q ListQuery) Encode() string {
	v := url.Values{}
	v.Set("status", string(q.Status))
	if q.Site != "" {
		v.Set("site", q.Site)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	return v.Encode()
}

// A cursor is base64url("1|<status>|<site>|<seq>"): the index stream
// sequence to continue from, bound to the query it came from.
func encodeCursor(status ListStatus, site string, seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("1|" + string(status) + "|" + site + "|" + strconv.FormatUint(seq, 10)))
}

// decodeCursor returns the sequence in cursor c, which must have been made
// for the same status and site (a cursor of EncodeCursorKey returns 0).
func decodeCursor(c string, status ListStatus, site string) (uint64, error) {
	version, pos, err := cursorPosition(c, status, site)
	if err != nil {
		return 0, err
	}
	if version == "2" {
		_, err := DecodeCursorKey(c, status, site)
		return 0, err
	}
	seq, err := strconv.ParseUint(pos, 10, 64)
	if err != nil || seq == 0 || pos != strconv.FormatUint(seq, 10) {
		return 0, errors.New("after: invalid cursor: bad position")
	}
	return seq, nil
}

// cursorPosition checks cursor c ("<version>|<status>|<site>|<position>",
// base64url) against the query's status and site and returns its version
// and position.
func cursorPosition(c string, status ListStatus, site string) (version, pos string, err error) {
	bad := func(why string) (string, string, error) { return "", "", fmt.Errorf("after: invalid cursor: %s", why) }
	if len(c) > MaxCursorLen {
		return bad("too long")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil {
		return bad("not base64url")
	}
	parts := strings.Split(string(b), "|")
	if len(parts) != 4 || (parts[0] != "1" && parts[0] != "2") {
		return bad("unknown format")
	}
	if parts[1] != string(status) || parts[2] != site {
		return bad("made for another status or site")
	}
	return parts[0], parts[3], nil
}

// EncodeCursorKey makes the cursor of a State that pages by key: pos is
// where the next page starts (opaque to the client), bound to the query's
// status and site like every cursor.
func EncodeCursorKey(status ListStatus, site string, pos []byte) string {
	return base64.RawURLEncoding.EncodeToString([]byte("2|" + string(status) + "|" + site + "|" + base64.RawURLEncoding.EncodeToString(pos)))
}

// DecodeCursorKey returns the position in a cursor made by EncodeCursorKey
// for the same status and site.
func DecodeCursorKey(c string, status ListStatus, site string) ([]byte, error) {
	version, p, err := cursorPosition(c, status, site)
	if err != nil {
		return nil, err
	}
	pos, err := base64.RawURLEncoding.Strict().DecodeString(p)
	if version != "2" || err != nil || len(pos) == 0 {
		return nil, errors.New("after: invalid cursor: bad position")
	}
	return pos, nil
}

// filterKey returns the index key kind and KV key filter that List scans.
func (q ListQuery) filterKey() (idxKey, string) {
	kind := map[ListStatus]idxKind{
		ListPending: kindPending, ListOverdue: kindPending, ListDeadLettered: kindDead, ListConflict: kindConflict,
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
func (s *Store) List(ctx context.Context, q ListQuery) ([]Completion, string, error) {
	if err := q.Validate(); err != nil {
		return nil, "", err
	}
	if s.ix == nil {
		return nil, "", ErrNoIndex
	}
	seq := uint64(1)
	if q.After != "" {
		seq, _ = decodeCursor(q.After, q.Status, q.Site)
		seq = max(seq, 1) // a cursor of another State starts over
	}
	k, filter := q.filterKey()
	now := s.now()
	cutoff := now.Add(-s.overdueAfter)
	items := make([]Completion, 0, min(q.Limit, 128))
	scanned, exhausted := 0, false
	for len(items) < q.Limit && scanned < MaxListScan && !exhausted {
		want := q.Limit - len(items)
		fetch := want
		if q.Status == ListOverdue {
			fetch = 512
		}
		fetch = min(fetch, MaxListScan-scanned)
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
			if q.Status == ListOverdue {
				if p, ok := parsePublished(e.Value); !ok || p.After(cutoff) {
					continue
				}
			}
			cands = append(cands, i)
		}
		found, err := s.verify(ctx, k, q.Status == ListOverdue, ents, cands, now)
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
	return items, encodeCursor(q.Status, q.Site, seq), nil
}

// verify reads the records of ents[cands] in parallel and returns, per
// entry, the record if it really is in state k as of now.
func (s *Store) verify(ctx context.Context, k idxKey, overdue bool, ents []idxEntry, cands []int, now time.Time) ([]*Completion, error) {
	found := make([]*Completion, len(ents))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listVerifyParallel)
	for _, i := range cands {
		g.Go(func() error {
			ek, id, err := parseIndexKey(ents[i].Key)
			if err != nil || ek != k {
				return nil // not ours (written by hand); skip
			}
			c, _, _, err := s.get(gctx, id)
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorruptRecord) {
				return nil // an intent whose record is not written yet, or a record to repair
			}
			if err != nil {
				return err
			}
			c.view(now, s.overdueAfter)
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

// Summary is an overview of the completion store.
type Summary struct {
	GeneratedAt  time.Time `json:"generated_at"`
	OverdueAfter string    `json:"overdue_after"`
	// Events is the number of completion records.
	Events       int64 `json:"events"`
	Pending      int64 `json:"pending"`
	Complete     int64 `json:"complete"`
	DeadLettered int64 `json:"dead_lettered"`
	Conflict     int64 `json:"conflict"`
	Overdue      int64 `json:"overdue"`
	// PendingOriginUnknown counts pending events whose origin message has
	// not been seen (receipts arrived first, or origin tracking is off),
	// events of status origin_unknown included; Pending includes them all.
	PendingOriginUnknown int64 `json:"pending_origin_unknown"`
	// Unidentified counts the origin messages without a usable event_id
	// (Service.Unidentified lists them); they are in no other count.
	Unidentified int64 `json:"unidentified"`
	// OldestPending is the pending event (with a known origin) published
	// first; nil when there is none.
	OldestPending *PendingAge `json:"oldest_pending,omitempty"`
	// Truncated is set when a scan hit MaxSummaryScan: Overdue,
	// PendingOriginUnknown and the per-site Overdue are then lower bounds
	// and OldestPending the oldest of the entries scanned.
	Truncated bool          `json:"truncated,omitempty"`
	Sites     []SiteSummary `json:"sites"`
	// Instance holds the counters of the service instance that answered
	// (since it started; receipts applied and duplicates absorbed), when
	// the answer came from a Service.
	Instance *Stats `json:"instance,omitempty"`
}

// SiteSummary is one site's row in a Summary. Pending counts events the
// site has not reported yet.
type SiteSummary struct {
	Site          string      `json:"site"`
	Pending       int64       `json:"pending"`
	Overdue       int64       `json:"overdue"`
	DeadLettered  int64       `json:"dead_lettered"`
	Conflict      int64       `json:"conflict"`
	OldestPending *PendingAge `json:"oldest_pending,omitempty"`
}

// PendingAge names a pending event and how long ago it was published.
type PendingAge struct {
	EventID     string    `json:"event_id"`
	PublishedAt time.Time `json:"published_at"`
	AgeSeconds  float64   `json:"age_seconds"`
}

func (p *PendingAge) offer(id string, at, now time.Time) *PendingAge {
	if p != nil && !at.Before(p.PublishedAt) {
		return p
	}
	return &PendingAge{EventID: id, PublishedAt: at, AgeSeconds: now.Sub(at).Seconds()}
}

// Summary counts events per status and per site from the status index.
//
// Status counts are exact counts of index entries (one batched direct get
// each); Complete is Events − Pending − DeadLettered. Overdue, the oldest
// pending event and the set of sites come from scans bounded by
// MaxSummaryScan entries (see Truncated). Sites are StoreConfig.Sites plus
// every site that has index entries within the scans. Counts are read one
// after another, not as one snapshot, and may include index entries a crash
// left behind until List or a redelivered receipt removes them.
func (s *Store) Summary(ctx context.Context) (Summary, error) {
	if s.ix == nil {
		return Summary{}, ErrNoIndex
	}
	now := s.now().UTC()
	sum := Summary{GeneratedAt: now, OverdueAfter: s.overdueAfter.String()}
	if err := s.summaryCounts(ctx, &sum); err != nil {
		return Summary{}, err
	}
	if err := s.summaryPending(ctx, &sum, now); err != nil {
		return Summary{}, err
	}
	if err := s.summarySites(ctx, &sum, now); err != nil {
		return Summary{}, err
	}
	return sum, nil
}

// summaryCounts fills the event-level counts: exact counts of index
// entries, and Complete as the rest.
func (s *Store) summaryCounts(ctx context.Context, sum *Summary) error {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("receipts: summary: %w", err)
	}
	sum.Events = int64(st.Values())
	for _, c := range []struct {
		p      *int64
		filter string
	}{{&sum.Pending, "p.=.>"}, {&sum.DeadLettered, "d.=.>"}, {&sum.Conflict, "c.=.>"}} {
		if *c.p, err = s.ix.count(ctx, c.filter); err != nil {
			return err
		}
	}
	sum.Complete = max(0, sum.Events-sum.Pending-sum.DeadLettered)
	return nil
}

// summaryPending scans the event-level pending entries: overdue, origin
// unknown, the oldest.
func (s *Store) summaryPending(ctx context.Context, sum *Summary, now time.Time) error {
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
		sum.OldestPending = sum.OldestPending.offer(id, p, now)
	})
	sum.Truncated = trunc
	return err
}

// summarySites finds the sites (configured, and those with index entries
// within the scans), their overdue and oldest pending events, and counts
// each site's entries exactly.
func (s *Store) summarySites(ctx context.Context, sum *Summary, now time.Time) error {
	cutoff := now.Add(-s.overdueAfter)
	sites := map[string]*SiteSummary{}
	site := func(name string) *SiteSummary {
		if r, ok := sites[name]; ok || len(sites) >= MaxSummarySites {
			return r
		}
		sites[name] = &SiteSummary{Site: name}
		return sites[name]
	}
	for _, name := range s.sites {
		site(name)
	}
	for _, filter := range []string{"p.*.>", "d.*.>", "c.*.>"} {
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
				r.OldestPending = r.OldestPending.offer(id, p, now)
			}
		})
		if err != nil {
			return err
		}
		sum.Truncated = sum.Truncated || trunc
	}
	sum.Sites = make([]SiteSummary, 0, len(sites))
	for _, r := range sites {
		sum.Sites = append(sum.Sites, *r)
	}
	slices.SortFunc(sum.Sites, func(a, b SiteSummary) int { return strings.Compare(a.Site, b.Site) })
	return s.countSites(ctx, sum.Sites)
}

// countSites counts each site's pending, dead-lettered and conflict
// entries, eight lookups at a time.
func (s *Store) countSites(ctx context.Context, sites []SiteSummary) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range sites {
		r := &sites[i]
		for _, c := range []struct {
			p    *int64
			kind idxKind
		}{{&r.Pending, kindPending}, {&r.DeadLettered, kindDead}, {&r.Conflict, kindConflict}} {
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
	for n < MaxSummaryScan {
		ents, more, err := s.ix.batch(ctx, filter, seq, min(1000, MaxSummaryScan-n))
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

// StatusSource answers status queries. *Store, *Service and *StatusClient
// implement it; NewHTTPHandler and StartMicro serve one.
type StatusSource interface {
	Get(ctx context.Context, eventID string) (Completion, error)
	List(ctx context.Context, q ListQuery) ([]Completion, string, error)
	Summary(ctx context.Context) (Summary, error)
}

var (
	_ StatusSource = (*Store)(nil)
	_ StatusSource = (*Service)(nil)
	_ StatusSource = (*StatusClient)(nil)
)

// Get returns the completion record of eventID (see Store.Get), with
// Cleaned set when an attached Cleaner deleted its origin message;
// ErrNotReady before Setup or Run has opened the buckets.
func (s *Service) Get(ctx context.Context, eventID string) (Completion, error) {
	st := s.State()
	if st == nil {
		return Completion{}, ErrNotReady
	}
	c, err := st.Get(ctx, eventID)
	if cl := s.cleaner.Load(); err == nil && cl != nil {
		c.Cleaned, err = cl.Cleaned(ctx, &c)
	}
	return c, err
}

// List returns a page of events (see Store.List); ErrNotReady before Setup
// or Run has opened the buckets.
func (s *Service) List(ctx context.Context, q ListQuery) ([]Completion, string, error) {
	st := s.State()
	if st == nil {
		if err := q.Validate(); err != nil {
			return nil, "", err
		}
		return nil, "", ErrNotReady
	}
	return st.List(ctx, q)
}

// Summary returns Store.Summary with this instance's Stats; ErrNotReady
// before Setup or Run has opened the buckets.
func (s *Service) Summary(ctx context.Context) (Summary, error) {
	st := s.State()
	if st == nil {
		return Summary{}, ErrNotReady
	}
	sum, err := st.Summary(ctx)
	if err != nil {
		return Summary{}, err
	}
	if sum.Unidentified, err = s.UnidentifiedCount(ctx); err != nil {
		return Summary{}, err
	}
	stats := s.Stats()
	sum.Instance = &stats
	return sum, nil
}
