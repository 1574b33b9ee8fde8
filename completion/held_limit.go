package completion

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
)

// Held receipts are bounded per site. A receipt for an event L1 has not
// seen costs L1 a record until the event's origin arrives or HoldFor ends,
// and a site can send any number of them (a stolen edge forging event
// ids). So each site may hold at most HeldMaxPerSite receipts and
// HeldMaxBytesPerSite bytes of them. Past either bound, the site's held
// events are quarantined oldest first (by the last receipt held for each),
// with the refusal held_limit, exactly as HoldFor expires them: the
// quarantine records are PubAck'ed before the record is removed, and the
// removal is a compare-and-set on the record read, so a receipt or an
// origin that arrives meanwhile keeps it, and a crash leaves the receipts
// held, never lost.
//
// The Service keeps a tally of the held receipts per site in memory: each
// receipt held adds to it, each origin that releases an event and each
// record removed takes from it, and every expiry round (HoldFor/4, at most
// a minute) counts it again from the State, which corrects what other
// instances sharing the State did. The receipts loop enforces the bounds
// after each batch that held a receipt of a site past its bound, before it
// takes the next batch: a site is then over its bound by at most the
// receipts of the batches being applied (maxBatchWorkers·ApplyBatch), and
// a flood of such receipts is slowed to the pace of their quarantine
// instead of growing L1's state.

// HeldUsage is what one site's held receipts take at L1.
type HeldUsage struct {
	// Receipts is the number of receipts held for the site.
	Receipts int `json:"receipts"`
	// Bytes is their size (each receipt's encoding).
	Bytes int64 `json:"bytes"`
}

// HeldBySite returns, per site, the receipts this Service counts as held
// (its tally; see held_limit.go).
func (s *Service) HeldBySite() map[string]HeldUsage { return s.heldTally.usage() }

// heldEvictBatch is the most held events one pass quarantines at once; the
// State commits their removals together.
const heldEvictBatch = 64

// heldTally counts the held receipts per site.
type heldTally struct {
	mu    sync.Mutex
	sites map[string]*siteHeld
	// gone, while a rebuild reads the State, names the events the tally
	// forgot or counted again meanwhile: the read may be older for them.
	gone map[string]struct{}
}

type siteHeld struct {
	events map[string]heldEntry // by event_id
	use    HeldUsage
}

// heldEntry is what one site holds for one event.
type heldEntry struct {
	last  time.Time // the newest of the site's receipts held for the event
	n     int
	bytes int64
	noted time.Time // when the tally learnt it
}

func (t *heldTally) site(name string) *siteHeld {
	if t.sites == nil {
		t.sites = map[string]*siteHeld{}
	}
	sh := t.sites[name]
	if sh == nil {
		sh = &siteHeld{events: map[string]heldEntry{}}
		t.sites[name] = sh
	}
	return sh
}

func (sh *siteHeld) put(id string, e heldEntry) {
	sh.drop(id)
	sh.events[id] = e
	sh.use.Receipts += e.n
	sh.use.Bytes += e.bytes
}

func (sh *siteHeld) drop(id string) {
	if old, ok := sh.events[id]; ok {
		delete(sh.events, id)
		sh.use.Receipts -= old.n
		sh.use.Bytes -= old.bytes
	}
}

// add counts one receipt held for event id, of site, received at, of size bytes.
func (t *heldTally) add(site, id string, at time.Time, bytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sh := t.site(site)
	e := sh.events[id]
	e.n++
	e.bytes += bytes
	e.last = maxTime(e.last, at)
	e.noted = time.Now()
	sh.put(id, e)
}

// forget removes event id from every site.
func (t *heldTally) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gone != nil {
		t.gone[id] = struct{}{}
	}
	for _, sh := range t.sites {
		sh.drop(id)
	}
}

// set replaces what the tally knows of c's event by what c holds.
func (t *heldTally) set(c *record.Completion) {
	es := heldEntries(c, time.Now())
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gone != nil {
		t.gone[c.EventID] = struct{}{}
	}
	for _, sh := range t.sites {
		sh.drop(c.EventID)
	}
	for site, e := range es {
		t.site(site).put(c.EventID, e)
	}
}

// startRebuild marks the start of a read of the State for rebuild.
func (t *heldTally) startRebuild() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone = map[string]struct{}{}
}

// rebuild replaces the tally by what held holds (every record of status
// origin_unknown, read from the State after startRebuild, at since),
// keeping the entries it learnt after since, which the read may have
// missed, and leaving out those it forgot meanwhile.
func (t *heldTally) rebuild(held []record.Completion, since time.Time) {
	now := time.Now()
	fresh := map[string]*siteHeld{}
	put := func(site, id string, e heldEntry) {
		sh := fresh[site]
		if sh == nil {
			sh = &siteHeld{events: map[string]heldEntry{}}
			fresh[site] = sh
		}
		sh.put(id, e)
	}
	for i := range held {
		held[i].Derive()
		if held[i].Status != record.EventOriginUnknown {
			continue
		}
		for site, e := range heldEntries(&held[i], now) {
			put(site, held[i].EventID, e)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.gone {
		for _, sh := range fresh {
			sh.drop(id)
		}
	}
	t.gone = nil
	for site, sh := range t.sites {
		for id, e := range sh.events {
			if !e.noted.Before(since) {
				put(site, id, e)
			}
		}
	}
	t.sites = fresh
}

// heldEntries groups the receipts c holds by their site.
func heldEntries(c *record.Completion, noted time.Time) map[string]heldEntry {
	out := map[string]heldEntry{}
	for p, h := range c.Held {
		e := out[h.Site]
		e.n++
		e.bytes += heldSize(heldReceipt(c, p))
		e.last = maxTime(e.last, h.ReceivedAt)
		e.noted = noted
		out[h.Site] = e
	}
	return out
}

// heldSize is the size a held receipt counts for: its encoding.
func heldSize(r receipt.Receipt) int64 {
	data, err := r.Encode()
	if err != nil {
		return 0
	}
	return int64(len(data))
}

func (t *heldTally) usage() map[string]HeldUsage {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]HeldUsage, len(t.sites))
	for site, sh := range t.sites {
		out[site] = sh.use
	}
	return out
}

// heldBounds are a site's bounds; a negative one is no bound.
type heldBounds struct {
	receipts int
	bytes    int64
}

func (b heldBounds) over(u HeldUsage) bool {
	return (b.receipts >= 0 && u.Receipts > b.receipts) || (b.bytes >= 0 && u.Bytes > b.bytes)
}

// overSites returns the sites past b, sorted.
func (t *heldTally) overSites(b heldBounds) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for site, sh := range t.sites {
		if b.over(sh.use) {
			out = append(out, site)
		}
	}
	slices.Sort(out)
	return out
}

// oldest returns site's held events, oldest first, that must go for the
// site to be within b.
func (t *heldTally) oldest(site string, b heldBounds) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	sh := t.sites[site]
	if sh == nil || !b.over(sh.use) {
		return nil
	}
	type aged struct {
		id string
		heldEntry
	}
	all := make([]aged, 0, len(sh.events))
	for id, e := range sh.events {
		all = append(all, aged{id, e})
	}
	slices.SortFunc(all, func(a, b aged) int {
		return cmp.Or(a.last.Compare(b.last), cmp.Compare(a.id, b.id))
	})
	var out []string
	u := sh.use
	for _, a := range all {
		if !b.over(u) {
			break
		}
		out = append(out, a.id)
		u.Receipts -= a.n
		u.Bytes -= a.bytes
	}
	return out
}

// holdsFor reports whether c holds a receipt of site.
func holdsFor(c *record.Completion, site string) bool {
	for _, h := range c.Held {
		if h.Site == site {
			return true
		}
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (s *Service) heldBounds() heldBounds {
	return heldBounds{receipts: s.cfg.HeldMaxPerSite, bytes: s.cfg.HeldMaxBytesPerSite}
}

// noteHeld counts in the tally a receipt the State has just held.
func (s *Service) noteHeld(r receipt.Receipt, receivedAt time.Time) {
	c := record.Completion{EventID: r.EventID, OriginStream: r.OriginStream, Held: map[string]record.ProcessorRecord{
		r.Processor: {Status: r.Status, Site: r.Site, ReceiptID: r.ReceiptID, ProcessedAt: r.ProcessedAt, ReceivedAt: receivedAt, Reason: r.Reason},
	}}
	s.heldTally.add(r.Site, r.EventID, receivedAt, heldSize(heldReceipt(&c, r.Processor)))
}

// limitHeld quarantines, for each site past its bounds, its oldest held
// events until it is within them again, or until a pass makes no progress
// (the State or the quarantine stream failing: the next call tries again).
// One call runs at a time.
func (s *Service) limitHeld(ctx context.Context) {
	b := s.heldBounds()
	if s.cfg.OriginStream == "" || len(s.heldTally.overSites(b)) == 0 {
		return
	}
	st := s.State()
	if st == nil {
		return
	}
	s.heldLimitMu.Lock()
	defer s.heldLimitMu.Unlock()
	for _, site := range s.heldTally.overSites(b) {
		before := s.heldLimited.Load()
	passes:
		for pass := 0; pass < heldMaxPasses && ctx.Err() == nil; pass++ {
			ids := s.heldTally.oldest(site, b)
			if len(ids) == 0 {
				break
			}
			for chunk := range slices.Chunk(ids, heldEvictBatch) {
				progress, err := s.evictHeld(ctx, st, site, chunk)
				if err != nil {
					s.log.Warn("receipts: quarantining held receipts past their site's bound", "site", site, "bound", b.String(), "err", err)
				}
				if !progress || ctx.Err() != nil {
					break passes
				}
			}
		}
		if n := s.heldLimited.Load() - before; n > 0 {
			u := s.heldTally.usage()[site]
			s.log.Warn("receipts: held receipts quarantined: their site held more than its bound of receipts for events L1 has not seen, and these were its oldest",
				"site", site, "refusal", RefusedHeldLimit, "quarantined", n, "bound", b.String(), "held", u.Receipts, "held_bytes", u.Bytes)
		}
	}
}

// heldMaxPasses bounds the passes of one limitHeld over one site, against
// records that keep changing under it.
const heldMaxPasses = 100

// evictHeld quarantines the held events ids of site, in parallel (the
// State commits their removals together), and reports whether it removed
// or corrected any of the tally's entries.
func (s *Service) evictHeld(ctx context.Context, st record.State, site string, ids []string) (bool, error) {
	b := s.heldBounds()
	var (
		mu       sync.Mutex
		progress bool
		errs     []error
		wg       sync.WaitGroup
	)
	for _, id := range ids {
		wg.Go(func() {
			moved, err := s.evictEvent(ctx, st, site, id, b)
			mu.Lock()
			defer mu.Unlock()
			progress = progress || moved
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return progress, errors.Join(errs...)
}

// evictEvent quarantines every receipt held for event id and removes its
// record, if it is still held for site. It reports whether the tally
// changed.
func (s *Service) evictEvent(ctx context.Context, st record.State, site, id string, b heldBounds) (bool, error) {
	getCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	c, err := st.Get(getCtx, id)
	cancel()
	if errors.Is(err, record.ErrNotFound) {
		s.heldTally.forget(id)
		return true, nil
	}
	if err != nil {
		return false, err
	}
	c.Derive()
	if !holdsFor(&c, site) || c.Status != record.EventOriginUnknown {
		s.heldTally.set(&c) // released, or no longer the site's
		return true, nil
	}
	why := func(p string) string {
		return fmt.Sprintf("%s: site %s held more than its bound (%s) for events L1 has not seen, and this event's were its oldest; held receipt of processor %s for event %s, nothing was recorded",
			RefusedHeldLimit, site, b, p, receipt.ShortQuote(id))
	}
	procs, removed, err := s.dropHeld(ctx, st, &c, why)
	if err != nil {
		return false, err
	}
	if !removed {
		// Changed since it was read: count it as it is now.
		getCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
		defer cancel()
		now, err := st.Get(getCtx, id)
		switch {
		case errors.Is(err, record.ErrNotFound):
			s.heldTally.forget(id)
		case err != nil:
			return false, err
		default:
			now.Derive()
			s.heldTally.set(&now)
		}
		return true, nil
	}
	s.heldLimited.Add(uint64(len(procs)))
	for range procs {
		s.refused.add(RefusedHeldLimit)
	}
	s.log.Debug("receipts: held receipts quarantined past their site's bound",
		"event_id", receipt.ShortQuote(id), "refusal", RefusedHeldLimit, "site", site, "processors", procs)
	return true, nil
}

// String describes the bounds ("1000 receipts or 1048576 bytes").
func (b heldBounds) String() string {
	switch {
	case b.receipts >= 0 && b.bytes >= 0:
		return fmt.Sprintf("%d receipts or %d bytes", b.receipts, b.bytes)
	case b.receipts >= 0:
		return fmt.Sprintf("%d receipts", b.receipts)
	case b.bytes >= 0:
		return fmt.Sprintf("%d bytes", b.bytes)
	}
	return "no bound"
}
