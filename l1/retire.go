package l1

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/leafline/leafline/topology"
)

// An edge leaves the fleet by a topology change: marked retired
// (sites[].retired), which keeps its name and receipt key known, or
// removed. L1 then expects nothing more of it (Topology.Edges leaves it
// out), and closes every event still pending for it with the processor
// status retired (record.StatusRetired): terminal, not complete, kept in
// the completion log with who closed it and why, so the retirement is
// audited there. A receipt the edge sent before it was retired that
// arrives afterwards replaces the retirement (signed receipts need the
// site's key: retire a site before removing it, so that what it sent
// last is still verified). Cleanup counts a retired site's events as
// done for it.
//
// L1 closes them at start and every retireEvery: an event published just
// before the change, routed to the site by the topology L1 had then, is
// closed by the next round.

// retireEvery is how often L1 closes the events of retired sites.
const retireEvery = 5 * time.Second

// retireGone runs the retirement rounds until ctx ends.
func (a *Role) retireGone(ctx context.Context) error {
	tick := time.NewTicker(retireEvery)
	defer tick.Stop()
	for {
		a.retireOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// retireOnce closes the pending events of every site that is retired or
// gone from the topology, as far as L1's state names them.
func (a *Role) retireOnce(ctx context.Context) {
	svc := a.svc
	if svc == nil {
		return
	}
	sum, err := svc.Summary(ctx)
	if err != nil {
		return // not ready yet, or stopping: the next round
	}
	t := a.cfg.Topology
	for _, s := range sum.Sites {
		why := retiredWhy(t, s.Site)
		if s.Pending == 0 || why == "" {
			continue
		}
		n, err := svc.Retire(ctx, s.Site, fmt.Sprintf("site %s %s; closed by L1 site %s on %s", s.Site, why, a.site.Name, hostname()))
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("retire: closing a retired site's pending events failed; retrying", "edge", s.Site, "err", err)
			}
			continue
		}
		if n > 0 {
			a.metrics.retiredEvents.WithLabelValues(s.Site).Add(float64(n))
			a.log.Warn("retire: closed the events still pending for a retired site, status retired", "edge", s.Site, "events", n, "why", why)
		}
	}
}

// retiredWhy says why site is out of the fleet of t, or "" when it is an
// active edge.
func retiredWhy(t *topology.Topology, site string) string {
	s, ok := t.Site(site)
	switch {
	case !ok:
		return "is no longer in the topology"
	case s.Retired:
		return "is retired (sites[].retired in the topology)"
	case slices.ContainsFunc(t.Edges(), func(e *topology.Site) bool { return e.Name == site }):
		return ""
	}
	return "is not an edge in the topology"
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "an unknown host"
	}
	return h
}
