// Package hub is the hub role of a leafline box: the aggregation node
// between L1 and the edges. Its links (durable sourcing or the relay, see
// package box) carry the events down and the receipts up; the role adds
// the link beats that show L1's console which edges are connected.
package hub

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/status/console"
)

// Role is the hub role. Make it with New and give it to box.New.
type Role struct {
	box.BaseRole
	b *box.App
}

// New returns the hub role.
func New() *Role { return &Role{} }

// Init keeps the box.
func (h *Role) Init(b *box.App) error { h.b = b; return nil }

// Loops sends the link beats. A hub box on a cluster runs no server of its
// own and so sends none, like a stock nats-server hub: its sites show as
// unknown on the console.
func (h *Role) Loops(ctx context.Context, g *errgroup.Group) {
	if srv := h.b.Server(); srv != nil {
		g.Go(func() error { h.publishLinkBeats(ctx, srv); return nil })
	}
}

// publishLinkBeats tells L1, every console.BeatInterval, which of the
// hub's downstream sites have their leafnode link up (a leafnode's name is
// its box's site name), the bytes each link has moved, and what the hub
// holds for each edge and how far it released it (box.App.Backlogs): L1
// sends an edge's released events again by it. A beat lost on the way is
// replaced by the next.
func (h *Role) publishLinkBeats(ctx context.Context, srv *server.Server) {
	var down []string
	for _, s := range h.b.Config().Topology.Downstream(h.b.Site().Name) {
		down = append(down, s.Name)
	}
	w := console.NewLinkWatcher(h.b.Site().Name, down, time.Now())
	tick := time.NewTicker(console.BeatInterval)
	defer tick.Stop()
	for {
		connected := map[string]bool{}
		if lz, err := srv.Leafz(nil); err == nil {
			for _, l := range lz.Leafs {
				if !l.IsSpoke {
					connected[l.Name] = true
				}
			}
		}
		beat := w.Observe(connected, time.Now())
		totals := h.b.Metrics().LinkTotals(srv)
		backlogs := h.b.Backlogs()
		for i := range beat.Sites {
			l := &beat.Sites[i]
			t := totals[l.Site]
			l.BytesIn, l.BytesOut = t.In, t.Out
			if bl, ok := backlogs[l.Site]; ok {
				l.Backlog = &console.Backlog{Messages: bl.Msgs, Bytes: bl.Bytes, MaxBytes: bl.MaxBytes, Pending: bl.Pending,
					Released: bl.Released.Msgs, ReleasedThrough: bl.Released.Origin, ReleasedAt: bl.Released.At}
			}
		}
		b, _ := json.Marshal(beat)
		_ = h.b.Conn().Publish(console.LinkSubject(h.b.Site().Name), b)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
