package jsplan

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
)

// Provision creates, or updates in place, the streams and consumers of the
// config's site through js, as the box does on startup. It is for a site
// whose server leafline does not run: a stock nats-server started from
// `leafline topology render`. Like the box, it never deletes, recreates or
// purges anything.
func Provision(ctx context.Context, js jetstream.JetStream, cfg *topology.Config) error {
	if cfg == nil || cfg.Topology == nil {
		return errors.New("jsplan: configuration has no topology")
	}
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return errors.New("jsplan: site " + cfg.Site + " is not in the topology")
	}
	if err := checkDomain(ctx, js, site); err != nil {
		return err
	}
	if err := StockServerTakes(cfg, site); err != nil {
		return err
	}
	return Reconcile(ctx, js, SitePlan(cfg, site))
}

// PlanWarnings lints the streams the config's site creates
// (topology.LintStreams). leafline's plan is built to pass; the same
// check applied to the streams of a live server finds what an operator
// changed by hand.
func PlanWarnings(cfg *topology.Config) []topology.Warning {
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return nil
	}
	return topology.LintStreams(StreamFacts(cfg, SitePlan(cfg, site).Streams), consumedSubjects(cfg, site))
}

// StreamFacts describes stream configs for topology.LintStreams, naming
// each stream's kind from the config's topology.
func StreamFacts(cfg *topology.Config, streams []jetstream.StreamConfig) []topology.StreamFacts {
	t := cfg.Topology
	kinds := map[string]string{
		t.Events.OriginStream: topology.StreamOrigin,
		t.Events.HubStream:    topology.StreamEvents,
		t.Events.EdgeStream:   topology.StreamEvents,
		t.Receipts.EdgeStream: topology.StreamReceipts,
		t.Receipts.HubStream:  topology.StreamReceipts,
		t.Receipts.L1Stream:   topology.StreamReceipts,
		cfg.DeadLetter.Stream: topology.StreamDLQ,
	}
	var out []topology.StreamFacts
	for _, sc := range streams {
		f := topology.StreamFacts{
			Name:      sc.Name,
			Kind:      kinds[sc.Name],
			Retention: map[jetstream.RetentionPolicy]string{jetstream.LimitsPolicy: "limits", jetstream.InterestPolicy: "interest", jetstream.WorkQueuePolicy: "workqueue"}[sc.Retention],
			Discard:   map[jetstream.DiscardPolicy]string{jetstream.DiscardOld: "old", jetstream.DiscardNew: "new"}[sc.Discard],
			Subjects:  sc.Subjects,
		}
		for _, src := range sc.Sources {
			f.Sources = append(f.Sources, topology.SourceFacts{
				Name: src.Name, Durable: src.Consumer != nil,
				External: src.External != nil || src.Domain != "",
			})
		}
		out = append(out, f)
	}
	return out
}

func consumedSubjects(cfg *topology.Config, site *topology.Site) []string {
	if site.Role == topology.RoleEdge && site.Filter != "" {
		return []string{site.Filter}
	}
	return cfg.Topology.Events.Subjects
}

// LiveWarnings lints the streams of the config's site as they are on the
// server behind js (topology.LintStreams): what an operator changed by hand
// on a stock nats-server, or a stream leafline's plan does not yet hold. A
// stream of the plan that is missing is reported too.
func LiveWarnings(ctx context.Context, js jetstream.JetStream, cfg *topology.Config) ([]topology.Warning, error) {
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return nil, errors.New("jsplan: site " + cfg.Site + " is not in the topology")
	}
	var live []jetstream.StreamConfig
	var out []topology.Warning
	if err := checkDomain(ctx, js, site); errors.Is(err, ErrWrongDomain) {
		out = append(out, topology.Warning{Path: "jetstream domain", Msg: err.Error()})
	}
	for _, want := range SitePlan(cfg, site).Streams {
		s, err := js.Stream(ctx, want.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			out = append(out, topology.Warning{Path: "stream " + want.Name, Msg: "missing: the site needs it (leafline provision creates it)"})
			continue
		case err != nil:
			return nil, fmt.Errorf("stream %s: %w", want.Name, err)
		}
		live = append(live, s.CachedInfo().Config)
		out = append(out, bindingWarnings(want, s.CachedInfo().Config)...) // lint.go
	}
	out = append(out, topology.LintStreams(StreamFacts(cfg, live), consumedSubjects(cfg, site))...)
	if w, ok := ServerVersionWarning(js.Conn().ConnectedServerVersion()); ok {
		out = append(out, w)
	}
	return out, nil
}

// ServerVersionWarning warns about a stock nats-server, of version v as its
// INFO reports it, whose durable sourcing can acknowledge messages it never
// stored: every release before 2.14.10, and 2.15 before 2.15.3. After a
// source consumer reset such a server counted deliveries made before the
// reset, dropped a newer one without asking for it again, and took the
// reset reply's delivered sequence as stored; its flow-control replies
// then ACKed what the next hop skipped, trimming deleted it, and only
// L1's redrive brought it back. A pre-release counts as its release; a
// version it cannot read gets no warning.
func ServerVersionWarning(v string) (topology.Warning, bool) {
	var major, minor, patch int
	core, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	if _, err := fmt.Sscanf(core, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return topology.Warning{}, false
	}
	fixed := major > 2 || major == 2 && (minor > 15 || minor == 15 && patch >= 3 || minor == 14 && patch >= 10)
	if fixed {
		return topology.Warning{}, false
	}
	return topology.Warning{
		Path: "nats-server " + v,
		Msg:  "its durable sourcing can acknowledge messages it never stored (fixed in 2.14.10 and 2.15.3); trimming then deletes them and only L1's redrive brings them back: upgrade the server",
	}, true
}
