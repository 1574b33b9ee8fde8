package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/status/console"
	"github.com/leafline/leafline/topology"
)

// WithConsoleSampleEvery sets how often L1's console samples the fleet
// (console.Config.SampleEvery); zero keeps the default.
func WithConsoleSampleEvery(d time.Duration) Option {
	return func(o *options) { o.consoleSample = d }
}

// startFleetLoops starts what lets L1 see the fleet: at a hub, the link
// beats; at L1, the console's sampler. A hub box on a cluster runs no
// server of its own and so sends no beats, like a stock nats-server hub:
// its sites show as unknown.
func (a *App) startFleetLoops(ctx context.Context, g *errgroup.Group) {
	a.metrics.watchLinks(a.opsSrv.Load)
	switch a.site.Role {
	case topology.RoleHub:
		if a.srv == nil {
			return
		}
		g.Go(func() error { a.publishLinkBeats(ctx); return nil })
	case topology.RoleL1:
		t := a.cfg.Topology
		sites := map[string]string{}
		for _, e := range t.Edges() {
			sites[e.Name] = e.Upstream
		}
		c, err := console.New(console.Config{
			Source: func() record.StatusSource {
				if l1 := a.opsL1.Load(); l1 != nil {
					return l1.svc
				}
				return nil
			},
			LastReceipts: func() map[string]time.Time {
				if l1 := a.opsL1.Load(); l1 != nil {
					return l1.svc.LastReceipts()
				}
				return nil
			},
			NC: a.nc, JS: a.js,
			ReceiptsStream: t.Receipts.L1Stream,
			SubjectPrefix:  t.Receipts.SubjectPrefix,
			Sites:          sites,
			SampleEvery:    a.opts.consoleSample,
			Logger:         a.log.With("component", "console"),
		})
		if err != nil {
			g.Go(func() error { return err })
			return
		}
		coll := c.Metrics(prometheus.Labels{"site": a.site.Name, "role": string(a.site.Role)})
		if err := a.metrics.reg.Register(coll); err != nil {
			c.Close()
			g.Go(func() error { return fmt.Errorf("console metrics: %w", err) })
			return
		}
		a.opsFleet.Store(c)
		g.Go(func() error {
			defer a.metrics.reg.Unregister(coll) // a restarted life registers its own
			defer c.Close()
			return c.Run(ctx)
		})
	}
}

// consoleHandler serves the current console, or 503 while there is none.
func (a *App) consoleHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := a.opsFleet.Load()
		if c == nil {
			msg, _ := a.notReady.Load().(string)
			http.Error(w, "the console is not running yet: "+msg, http.StatusServiceUnavailable)
			return
		}
		c.Handler().ServeHTTP(w, r)
	})
}

// publishLinkBeats tells L1, every console.BeatInterval, which of the
// hub's downstream sites have their leafnode link up (a leafnode's name is
// its box's site name), and the bytes each link has moved. A beat lost on
// the way is replaced by the next.
func (a *App) publishLinkBeats(ctx context.Context) {
	var down []string
	for _, s := range a.cfg.Topology.Downstream(a.site.Name) {
		down = append(down, s.Name)
	}
	w := console.NewLinkWatcher(a.site.Name, down, time.Now())
	tick := time.NewTicker(console.BeatInterval)
	defer tick.Stop()
	for {
		connected := map[string]bool{}
		if lz, err := a.srv.Leafz(nil); err == nil {
			for _, l := range lz.Leafs {
				if !l.IsSpoke {
					connected[l.Name] = true
				}
			}
		}
		beat := w.Observe(connected, time.Now())
		totals := a.metrics.linkTotals(a.srv)
		for i := range beat.Sites {
			l := &beat.Sites[i]
			t := totals[l.Site]
			l.BytesIn, l.BytesOut = t.In, t.Out
		}
		b, _ := json.Marshal(beat)
		_ = a.nc.Publish(console.LinkSubject(a.site.Name), b)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
