package l1

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/status/console"
)

// A hub releases an edge whose backlog passed its budget (topology
// Backlog): it stops holding the edge's oldest events and says, in its
// link beats, through which origin sequence. L1 then sends the edge's
// pending events up to there again, to that edge alone
// (completion.Service.Resend), once the edge is back: while its hub's
// latest beat says its link is up, and only as much as keeps what the hub
// holds for it under half its budget, so that a resend is never released
// again at once. Each round waits for a beat taken after the previous
// one, so that the beat counts what that round sent.
//
// A new release (a higher origin sequence) starts the edge's pending list
// again from its start, and sends only what it released: what was sent
// before and released again is sent once more, what was sent after the
// new release's origin sequence is not (Resend skips it). The progress is
// in memory: after L1 restarts, it sends an edge's released events again
// from the start, which costs a duplicate.
//
// The beats steer only when and how much: which events are sent comes
// from L1's own records (the edge's pending events), and what a hub, or
// a site that declares another's name to it, says can only cause a
// redundant copy, which the edge absorbs.

// resendEvery is how often L1 looks for released edges to send to.
const resendEvery = time.Second

// resendProgress is how far L1 has sent an edge's released events.
type resendProgress struct {
	through uint64 // the release it sends (origin sequence)
	cursor  string // the edge's pending list, after what was sent
	done    bool
	sentAt  time.Time // the last round that sent something
	sent    int
}

// resender sends released edges' events again, steered by the hubs' beats.
type resender struct {
	svc func() *completion.Service
	mu  sync.Mutex
	// beats are the last beat of each hub, heard when L1 received it
	// (its own clock); prog each edge's progress.
	beats map[string]console.LinkBeat
	heard map[string]time.Time
	prog  map[string]*resendProgress
}

// newResender is a resender with no beat heard yet.
func newResender(svc func() *completion.Service) *resender {
	return &resender{svc: svc, beats: map[string]console.LinkBeat{}, heard: map[string]time.Time{}, prog: map[string]*resendProgress{}}
}

// addressable reports whether L1 can send an event to site alone: the
// latest beat of its hub says what it holds for site, which a hub does
// only when its consumer for site takes what is addressed to it
// (topology.AddressFilter). An event for another site is sent again on
// its own subject, to every edge it matches (a hub of an earlier
// version, a hub on a cluster, which sends no beats, a direct-mode edge).
func (r *resender) addressable(site string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.beats {
		for _, l := range b.Sites {
			if l.Site == site {
				return l.Backlog != nil
			}
		}
	}
	return false
}

// resendReleased runs the resender until ctx ends.
func (a *Role) resendReleased(ctx context.Context) error {
	r := a.resend
	sub, err := a.nc.Subscribe(console.LinkSubjectPrefix+".*", func(m *nats.Msg) {
		var b console.LinkBeat
		if json.Unmarshal(m.Data, &b) != nil || console.LinkSubject(b.Hub) != m.Subject {
			return
		}
		r.mu.Lock()
		r.beats[b.Hub], r.heard[b.Hub] = b, time.Now()
		r.mu.Unlock()
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	tick := time.NewTicker(resendEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		for _, w := range r.round() {
			a.resendTo(ctx, r, w)
		}
	}
}

// resendWork is one edge to send to in a round.
type resendWork struct {
	site    string
	backlog console.Backlog
	prog    *resendProgress
}

// round returns the edges to send to now, and takes each new release.
func (r *resender) round() []resendWork {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []resendWork
	for hub, b := range r.beats {
		heard := r.heard[hub]
		for _, l := range b.Sites {
			bl := l.Backlog
			if bl == nil || bl.ReleasedThrough == 0 {
				continue
			}
			p := r.prog[l.Site]
			if p == nil || bl.ReleasedThrough > p.through {
				p = &resendProgress{through: bl.ReleasedThrough}
				r.prog[l.Site] = p
			}
			// A beat heard after the last round, which counts it.
			if p.done || !l.Connected || !heard.After(p.sentAt.Add(console.BeatInterval)) || bl.Bytes >= bl.MaxBytes/2 {
				continue
			}
			out = append(out, resendWork{site: l.Site, backlog: *bl, prog: p})
		}
	}
	return out
}

// resendTo sends one round of w's edge's released events.
func (a *Role) resendTo(ctx context.Context, r *resender, w resendWork) {
	svc := r.svc()
	if svc == nil {
		return
	}
	p := w.prog
	room := w.backlog.MaxBytes/2 - w.backlog.Bytes
	res, err := svc.Resend(ctx, w.site, p.through, p.cursor, room)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("resend: sending an edge's released events again failed; retrying", "edge", w.site, "err", err)
		}
		return
	}
	n := res.Events
	if p.sent == 0 && n > 0 {
		a.log.Info("resend: edge is back after its hub released its oldest events: sending its pending events again, to it alone",
			"edge", w.site, "released_through_origin_seq", p.through)
	}
	p.cursor, p.sent, p.sentAt = res.Next, p.sent+n, time.Now()
	if res.Done {
		p.done = true
		if p.sent > 0 {
			a.log.Info("resend: sent every released event again", "edge", w.site, "events", p.sent, "released_through_origin_seq", p.through)
		}
	}
	a.metrics.resent.WithLabelValues(w.site).Add(float64(n))
}
