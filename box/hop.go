package box

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/hop"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// startHopRelays runs the site's relay links in g, on a connection of
// their own whose inbox prefix is the only one the links let back.
func (a *App) startHopRelays(ctx context.Context, g *errgroup.Group) error {
	specs := jsplan.RelayLinks(a.cfg, a.site)
	if len(specs) == 0 {
		return nil
	}
	nc, err := nats.Connect("", nats.InProcessServer(a.srv),
		nats.Name("leafline-"+a.site.Name+"-relay"),
		nats.CustomInboxPrefix(topology.RelayInboxPrefix(a.site.Name)),
		nats.MaxReconnects(-1), a.natsErrors())
	if err != nil {
		return fmt.Errorf("relay: connect to embedded server: %w", err)
	}
	g.Go(func() error { <-ctx.Done(); nc.Close(); return nil })
	local, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	watch := newLeafWatch()
	if a.srv != nil {
		g.Go(func() error { watch.run(ctx, a.srv); return nil })
	}
	caps := map[string]*hop.Cap{} // by upstream site and stream
	var movers []*hop.Mover
	// The links of priority classes, by the upstream and stream they
	// take (key) and their class.
	type classLink struct{ key, class string }
	classes := map[classLink]*hop.Mover{}
	tips := a.tips
	for _, sp := range specs {
		up, err := jetstream.NewWithDomain(nc, sp.From.Domain)
		if err != nil {
			return err
		}
		name := sp.LinkName(a.site)
		// The link's cap holds each direction on its own: this relay
		// pulls one of them, the other end's relay the other. The
		// relays of a stream's priority classes and of the rest of it
		// share it, urgent first.
		capped := a.cfg.Topology.LinkBandwidth(jsplan.LowerEnd(a.site, sp.From))
		key := sp.From.Name + " " + sp.Stream
		if capped > 0 && caps[key] == nil {
			if caps[key], err = hop.NewCap(capped, 0); err != nil {
				return err
			}
		}
		var skip func(string) bool
		if classOf := sp.ClassOf; classOf != nil {
			// A class's messages are left to its link only once that
			// link has found its consumer: an upstream without it (not
			// yet given the class) would not keep them for it. A normal
			// message's class has no link here, so it is never skipped.
			skip = func(s string) bool {
				c := classes[classLink{key, classOf(s)}]
				return c != nil && c.Found()
			}
		}
		r, err := hop.New(hop.Link{
			Name: name, Upstream: up, Stream: sp.Stream, Consumer: sp.Consumer, Skip: skip,
			Local: local, LocalStream: sp.LocalStream, Subject: sp.Subject, Marks: sp.Marks,
			Batch: jsplan.RelayBatch, Cap: caps[key], Rank: sp.Rank, LinkUp: watch.next, IdleExpiry: relayIdleExpiry,
			Changed: func(c hop.UpstreamChange) { a.upstreamChanged(ctx, sp, name, c) },
			Stored:  func(at hop.Stored) { tips.Set(name, jsplan.Tip{Seq: at.Seq, Time: at.Time}) },
			Log:     a.log.With("component", "hop-relay", "link", name),
		})
		if err != nil {
			return err
		}
		if capped > 0 {
			a.metrics.setLinkCap(sp.From.Name, capped)
		}
		for _, kind := range []string{hop.UpstreamReplaced, hop.UpstreamRolledBack} {
			a.metrics.upstreamChanges.WithLabelValues(name, kind)
		}
		if sp.Class != "" {
			classes[classLink{key, sp.Class}] = r
		}
		movers = append(movers, r)
	}
	// Every mover exists before any runs: Skip reads classes.
	for _, r := range movers {
		g.Go(func() error { return r.Run(ctx) })
	}
	return nil
}

// relayIdleExpiry bounds the pull requests of a relay link with nothing
// to move (hop.Link.IdleExpiry): an idle link crosses a request and its
// expiry every 30 s rather than every 2 s, and a new message still comes
// at once; the leafnode watch below wakes a request that a cut lost.
const relayIdleExpiry = 30 * time.Second

// leafWatchEvery is how often a box counts its leafnode connections, and
// leafWatchFull how often it also compares their ids (a connection that
// replaced another between two counts).
const (
	leafWatchEvery = 10 * time.Millisecond
	leafWatchFull  = 500 * time.Millisecond
)

// leafWatch tells a box's relays when one of its leafnode connections
// comes up: a pull request sent before a cut was lost with the link, and
// a relay waiting on it asks again at once rather than at its expiry
// (hop.Link.LinkUp).
type leafWatch struct {
	mu sync.Mutex
	up chan struct{} // closed, and replaced, at each new connection
}

func newLeafWatch() *leafWatch { return &leafWatch{up: make(chan struct{})} }

// next returns a channel closed at the next new leafnode connection.
func (w *leafWatch) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.up
}

// run watches srv's leafnode connections until ctx is done: a count that
// grew, or a connection id not seen before, wakes the waiters.
func (w *leafWatch) run(ctx context.Context, srv *server.Server) {
	t := time.NewTicker(leafWatchEvery)
	defer t.Stop()
	var seen map[uint64]bool
	count, lastFull := srv.NumLeafNodes(), time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := srv.NumLeafNodes()
		fresh := n > count
		count = n
		if fresh || time.Since(lastFull) >= leafWatchFull {
			lastFull = time.Now()
			if lz, err := srv.Leafz(nil); err == nil {
				now := make(map[uint64]bool, len(lz.Leafs))
				for _, l := range lz.Leafs {
					now[l.ID] = true
					fresh = fresh || (seen != nil && !seen[l.ID])
				}
				seen = now
			}
		}
		if fresh {
			w.mu.Lock()
			close(w.up)
			w.up = make(chan struct{})
			w.mu.Unlock()
		}
	}
}
