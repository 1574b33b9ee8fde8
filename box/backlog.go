package box

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafline/leafline/hop"
	"github.com/leafline/leafline/jsplan"
)

// trimPlans returns the site's trim plans, each reading where the relays'
// links stand from a.tips (new with the plans), each budgeted one (a hub's
// events stream) with the hub's releases and the mark of the link that
// fills the stream, opening the releases bucket when there is one.
func (a *App) trimPlans(ctx context.Context) ([]jsplan.TrimPlan, error) {
	plans := jsplan.TrimPlans(a.cfg, a.site)
	// The relays started next report where their links stand.
	a.tips = &jsplan.Tips{}
	for i := range plans {
		p := &plans[i]
		p.Tips = a.tips
		if len(p.Budgets) == 0 {
			continue
		}
		for _, b := range p.Budgets {
			// Every edge's series exist from the start.
			a.metrics.backlog.released.WithLabelValues(b.Site)
			a.metrics.backlog.maxBytes.WithLabelValues(b.Site).Set(float64(b.MaxBytes))
		}
		if a.releases == nil {
			rel, err := openReleases(ctx, a.js, a.replicas())
			if err != nil {
				return nil, err
			}
			a.releases = rel
		}
		p.Releases = a.releases
		for _, sp := range jsplan.TakenLinks(a.cfg, a.site) {
			if sp.LocalStream == p.Stream && sp.Class == "" {
				link := sp.LinkName(a.site)
				p.Origin = func(h nats.Header) (uint64, bool) { return hop.SeqOf(h, link) }
			}
		}
	}
	return plans, nil
}

// prune deletes the consumers of edges that are no longer the site's
// (jsplan.Prune), logging each.
func (a *App) prune(ctx context.Context) error {
	gone, err := jsplan.Prune(ctx, a.js, a.cfg, a.site)
	for _, name := range gone {
		a.log.Warn("deleted the consumer of an edge that is no longer this hub's (retired, moved or removed): the hub holds nothing more for it",
			"stream", a.cfg.Topology.Events.HubStream, "consumer", name)
	}
	return err
}

// Backlogs returns what the box's streams held for each site with a
// backlog budget (a hub's edges) at the last trim pass, by site.
func (a *App) Backlogs() map[string]jsplan.Backlog {
	if m := a.backlogs.Load(); m != nil {
		return *m
	}
	return nil
}

// noteBacklogs keeps a trim pass's backlogs and exports them, logging
// each new release.
func (a *App) noteBacklogs(stream string, bls []jsplan.Backlog, now time.Time) {
	if len(bls) == 0 {
		return
	}
	m := map[string]jsplan.Backlog{}
	if old := a.backlogs.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	bm := &a.metrics.backlog
	for _, bl := range bls {
		prev, seen := m[bl.Site]
		m[bl.Site] = bl
		bm.msgs.WithLabelValues(bl.Site).Set(float64(bl.Msgs))
		bm.bytes.WithLabelValues(bl.Site).Set(float64(bl.Bytes))
		bm.maxBytes.WithLabelValues(bl.Site).Set(float64(bl.MaxBytes))
		bm.pending.WithLabelValues(bl.Site).Set(float64(bl.Pending))
		age := 0.0
		if bl.Msgs > 0 {
			age = now.Sub(bl.Oldest).Seconds()
		}
		bm.age.WithLabelValues(bl.Site).Set(age)
		added := bl.Released.Msgs
		if seen {
			added -= min(added, prev.Released.Msgs)
		}
		bm.released.WithLabelValues(bl.Site).Add(float64(added))
		if seen && bl.Released.Through > prev.Released.Through {
			a.log.Warn("edge past its backlog budget: released its oldest events at this hub; L1 sends them again to it alone when it is back",
				"edge", bl.Site, "stream", stream, "released_messages", bl.Released.Msgs-prev.Released.Msgs,
				"through_origin_seq", bl.Released.Origin, "max_bytes", bl.MaxBytes, "max_age", bl.MaxAge)
		}
	}
	a.backlogs.Store(&m)
}

// backlogMetrics export what a hub holds for each edge.
type backlogMetrics struct {
	msgs, bytes, maxBytes, age, pending *prometheus.GaugeVec
	released                            *prometheus.CounterVec
}

func (m *Metrics) initBacklog() {
	f := m.f
	m.backlog = backlogMetrics{
		msgs:     f.gaugeVec("edge_backlog_messages", "Messages of the hub's events stream after what the edge has taken (or was released): what the stream keeps for it.", "edge"),
		bytes:    f.gaugeVec("edge_backlog_bytes", "Bytes the hub's events stream keeps for the edge (its backlog messages times the stream's mean message size).", "edge"),
		maxBytes: f.gaugeVec("edge_backlog_max_bytes", "The edge's backlog budget at the hub in bytes (topology backlog.max_bytes): past it, or past backlog.max_age, the hub releases the edge's oldest events, which L1 sends again when the edge is back.", "edge"),
		age:      f.gaugeVec("edge_backlog_oldest_seconds", "Age of the oldest message the hub keeps for the edge (0: none).", "edge"),
		pending:  f.gaugeVec("edge_backlog_pending", "The edge's own messages at the hub that its consumers have not had ACKed.", "edge"),
		released: f.counterVec("edge_backlog_released_messages_total", "Messages of the hub's events stream released past the edge's floor because its backlog passed its budget: not lost, L1 sends the edge's events among them again to it alone.", "edge"),
	}
}

// upstreamChanged counts what the relay link name (of sp) found of its
// upstream. A hub whose events stream is new (it was replaced with a
// blank disk) releases every edge through what the old hub had taken
// from L1: L1 then sends each edge its events the old hub held and did
// not pass on.
func (a *App) upstreamChanged(ctx context.Context, sp jsplan.TakenLink, name string, c hop.UpstreamChange) {
	a.metrics.upstreamChanges.WithLabelValues(name, c.Kind).Inc()
	if c.Kind != hop.DownstreamNew || a.releases == nil || sp.LocalStream != a.cfg.Topology.Events.HubStream || c.Start < 2 {
		return
	}
	origin := c.Start - 1
	for _, e := range a.cfg.Topology.Downstream(a.site.Name) {
		prev := a.releases.Released(e.Name)
		if e.Direct() || prev.Origin >= origin {
			continue
		}
		rel := prev
		rel.Site, rel.Origin, rel.At = e.Name, origin, time.Now()
		if err := a.releases.Release(ctx, rel); err != nil {
			a.log.Warn("new events stream: could not record the release of an edge; L1's redrive repairs its events instead", "edge", e.Name, "err", err)
			continue
		}
		a.log.Warn("this hub's events stream is new (a blank disk): released its edge through what the old hub had taken; L1 sends it again what it had not passed on",
			"edge", e.Name, "through_origin_seq", origin)
	}
}
