package l1

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/status/console"
)

// WithConsoleSampleEvery sets how often L1's console samples the fleet
// (console.Config.SampleEvery); zero keeps the default.
func WithConsoleSampleEvery(d time.Duration) Option {
	return func(o *options) { o.consoleSample = d }
}

// startConsole starts the console's sampler: it shows the fleet from the
// receipts that reach L1 and the hubs' link beats.
func (a *Role) startConsole(ctx context.Context, g *errgroup.Group) {
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
	coll := c.Metrics(a.metrics.Labels())
	if err := a.metrics.Registry().Register(coll); err != nil {
		c.Close()
		g.Go(func() error { return fmt.Errorf("console metrics: %w", err) })
		return
	}
	a.opsFleet.Store(c)
	g.Go(func() error {
		defer a.metrics.Registry().Unregister(coll) // a restarted life registers its own
		defer c.Close()
		return c.Run(ctx)
	})
}

// consoleHandler serves the current console, or 503 while there is none.
func (a *Role) consoleHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := a.opsFleet.Load()
		if c == nil {
			http.Error(w, "the console is not running yet: "+a.b.NotReadyReason(), http.StatusServiceUnavailable)
			return
		}
		c.Handler().ServeHTTP(w, r)
	})
}
