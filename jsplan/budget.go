package jsplan

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
)

// Budget bounds what a stream holds for one site that takes it: a hub's
// events stream for each of its edges (topology.Backlog). Without it, the
// stream keeps every message until its slowest taker has taken it, so an
// edge that stays away fills the stream and stops every other edge.
type Budget struct {
	Site string
	// Consumers are the site's consumers on the stream (its link's, and
	// one per priority class): the site has taken a message once all of
	// them have.
	Consumers []string
	// MaxBytes and MaxAge bound the site's backlog: the bytes of the
	// messages after what it has taken, and how long ago the first of
	// them was stored.
	MaxBytes int64
	MaxAge   time.Duration
}

// Release is how far the trim released a site past what it took: it
// counts every message of the stream up to Through as taken by the site,
// and deletes them once the other takers have them. The upstream sends
// them again to that site alone when it is back (package completion's
// resend); Origin is the upstream sequence of the message at Through,
// which tells the upstream which of them.
type Release struct {
	Site    string    `json:"site"`
	Through uint64    `json:"through"` // a sequence of the stream
	Origin  uint64    `json:"origin_through"`
	Msgs    uint64    `json:"messages"` // released so far, in all
	At      time.Time `json:"at"`
}

// Releases keeps a stream's releases, durably.
type Releases interface {
	// Released is the latest release of site (the zero Release: none).
	Released(site string) Release
	// Release records r durably: the trim deletes nothing that r
	// releases before Release has returned nil.
	Release(ctx context.Context, r Release) error
}

// Backlog is what a stream holds for one site of a TrimPlan's Budgets,
// as a trim pass left it.
type Backlog struct {
	Site string
	// Msgs are the stream's messages after the site's floor (what it
	// has taken, or was released), of every subject: what the site keeps
	// in the stream. Bytes estimates their size as Msgs times the
	// stream's mean message size, and Oldest is when the first of them
	// was stored (zero when there is none).
	Msgs   uint64
	Bytes  int64
	Oldest time.Time
	// Pending are the site's own messages its consumers have not had
	// ACKed yet, delivered or not.
	Pending uint64
	// MaxBytes and MaxAge are its Budget's.
	MaxBytes int64
	MaxAge   time.Duration
	// Released is the site's latest release (zero: it never was).
	Released Release
}

// Over reports whether b is past its budget at now.
func (b Backlog) Over(now time.Time) bool {
	return b.Bytes > b.MaxBytes || (b.MaxAge > 0 && b.Msgs > 0 && now.Sub(b.Oldest) > b.MaxAge)
}

// budgets sets the edges' budgets on the trim plan of a hub's events
// stream: each edge that takes it, with its consumers and the bounds the
// topology gives it against the box's stream limit.
func budgets(cfg *topology.Config, site *topology.Site) []Budget {
	t := cfg.Topology
	var out []Budget
	for _, e := range t.Downstream(site.Name) {
		if e.Direct() {
			continue
		}
		b := Budget{Site: e.Name, Consumers: []string{takerName(t, site, e)}}
		for _, c := range t.Classes(e) {
			b.Consumers = append(b.Consumers, topology.RelayClassConsumerName(e.Name, c.Name))
		}
		b.MaxBytes, b.MaxAge = t.SiteBacklog(e, cfg.JetStream.MaxStreamBytes)
		out = append(out, b)
	}
	return out
}

// siteFloor is the sequence up to which b's site has taken every message
// (its consumers' takenUpTo, or its release when that is further), and
// its pending messages. ok is false when one of its consumers does not
// exist: the stream is then not trimmed at all.
func siteFloor(ctx context.Context, s jetstream.Stream, b Budget, infos map[string]*jetstream.ConsumerInfo, last uint64, rel Release) (floor, pending uint64, ok bool, err error) {
	floor = last
	for _, name := range b.Consumers {
		ci, found := infos[name]
		if !found {
			return 0, 0, false, nil
		}
		taken, err := takenUpTo(ctx, s, ci, last)
		if err != nil {
			return 0, 0, false, fmt.Errorf("consumer %s: %w", name, err)
		}
		floor = min(floor, taken)
		pending += ci.NumPending + uint64(ci.NumAckPending)
	}
	return max(floor, min(rel.Through, last)), pending, true, nil
}

// backlog measures what the stream holds after floor for b's site.
func backlog(ctx context.Context, s jetstream.Stream, b Budget, st jetstream.StreamState, floor, pending uint64, rel Release) (Backlog, error) {
	out := Backlog{Site: b.Site, Pending: pending, MaxBytes: b.MaxBytes, MaxAge: b.MaxAge, Released: rel}
	from := max(floor+1, st.FirstSeq)
	if st.Msgs == 0 || from > st.LastSeq {
		return out, nil
	}
	out.Msgs = st.LastSeq - from + 1
	out.Bytes = int64(out.Msgs * (st.Bytes / st.Msgs))
	m, err := s.GetMsg(ctx, from)
	if err != nil {
		return out, fmt.Errorf("message %d: %w", from, err)
	}
	out.Oldest = m.Time
	return out, nil
}

// releasePoint is the sequence through which a site over its budget is
// released: what it leaves holds at most half of MaxBytes and nothing
// older than half of MaxAge, so that a site that stays away is released
// in steps of half its budget, not at every message.
func releasePoint(ctx context.Context, s jetstream.Stream, bl Backlog, st jetstream.StreamState, floor uint64, now time.Time) (uint64, error) {
	r := floor
	if mean := st.Bytes / max(st.Msgs, 1); bl.Bytes > bl.MaxBytes && mean > 0 {
		keep := uint64(bl.MaxBytes/2) / mean
		if st.LastSeq > keep {
			r = max(r, st.LastSeq-keep)
		}
	}
	if bl.MaxAge > 0 && now.Sub(bl.Oldest) > bl.MaxAge {
		// The last message stored before the cutoff, by bisection: the
		// stream is in time order.
		cutoff := now.Add(-bl.MaxAge / 2)
		lo, hi := max(floor+1, st.FirstSeq), st.LastSeq
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			m, err := s.GetMsg(ctx, mid)
			if err != nil {
				return 0, fmt.Errorf("message %d: %w", mid, err)
			}
			if m.Time.Before(cutoff) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		r = max(r, lo)
	}
	return min(r, st.LastSeq), nil
}

// release records that b's site is released through r, before anything
// it releases is deleted, and returns the record.
func (p TrimPlan) release(ctx context.Context, s jetstream.Stream, b Budget, prev Release, st jetstream.StreamState, floor, r uint64, now time.Time) (Release, error) {
	m, err := s.GetMsg(ctx, r)
	if err != nil {
		return prev, fmt.Errorf("message %d: %w", r, err)
	}
	// The messages released now: those the stream holds after floor,
	// through r.
	n := r + 1 - max(floor+1, st.FirstSeq)
	rel := Release{Site: b.Site, Through: r, Origin: prev.Origin, Msgs: prev.Msgs + n, At: now}
	if p.Origin != nil {
		if o, ok := p.Origin(m.Header); ok {
			rel.Origin = max(rel.Origin, o)
		}
	}
	if err := p.Releases.Release(ctx, rel); err != nil {
		return prev, fmt.Errorf("record the release of %s: %w", b.Site, err)
	}
	return rel, nil
}

// budgetBound lowers bound to each budgeted site's floor, releasing each
// site over its budget first (with p.Releases; without, it only measures),
// and returns the sites' backlogs.
func (p TrimPlan) budgetBound(ctx context.Context, s jetstream.Stream, infos map[string]*jetstream.ConsumerInfo, st jetstream.StreamState, bound uint64, now time.Time) (uint64, []Backlog, bool, error) {
	var out []Backlog
	for _, b := range p.Budgets {
		var rel Release
		if p.Releases != nil {
			rel = p.Releases.Released(b.Site)
		}
		floor, pending, ok, err := siteFloor(ctx, s, b, infos, st.LastSeq, rel)
		if err != nil || !ok {
			return 0, nil, ok, err
		}
		bl, err := backlog(ctx, s, b, st, floor, pending, rel)
		if err != nil {
			return 0, nil, false, err
		}
		if p.Releases != nil && bl.Over(now) {
			r, err := releasePoint(ctx, s, bl, st, floor, now)
			if err != nil {
				return 0, nil, false, err
			}
			if r > floor {
				if rel, err = p.release(ctx, s, b, rel, st, floor, r, now); err != nil {
					return 0, nil, false, err
				}
				floor = r
				if bl, err = backlog(ctx, s, b, st, floor, pending, rel); err != nil {
					return 0, nil, false, err
				}
			}
		}
		out = append(out, bl)
		bound = min(bound, floor)
	}
	return bound, out, true, nil
}

// budgeted reports whether the consumer name belongs to one of p's budgets.
func (p TrimPlan) budgeted(name string) bool {
	return slices.ContainsFunc(p.Budgets, func(b Budget) bool { return slices.Contains(b.Consumers, name) })
}
