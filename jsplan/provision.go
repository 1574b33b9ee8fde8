package jsplan

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/subjects"
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
// (LintStreams). leafline's plan is built to pass; the same
// check applied to the streams of a live server finds what an operator
// changed by hand.
func PlanWarnings(cfg *topology.Config) []topology.Warning {
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return nil
	}
	return LintStreams(factsOf(cfg, SitePlan(cfg, site).Streams), consumedSubjects(cfg, site))
}

// factsOf describes stream configs for LintStreams, naming
// each stream's kind from the config's topology.
func factsOf(cfg *topology.Config, streams []jetstream.StreamConfig) []StreamFacts {
	t := cfg.Topology
	kinds := map[string]string{
		t.Events.OriginStream: StreamOrigin,
		t.Events.HubStream:    StreamEvents,
		t.Events.EdgeStream:   StreamEvents,
		t.Receipts.EdgeStream: StreamReceipts,
		t.Receipts.HubStream:  StreamReceipts,
		t.Receipts.L1Stream:   StreamReceipts,
		cfg.DeadLetter.Stream: StreamDLQ,
	}
	var out []StreamFacts
	for _, sc := range streams {
		f := StreamFacts{
			Name:      sc.Name,
			Kind:      kinds[sc.Name],
			Retention: map[jetstream.RetentionPolicy]string{jetstream.LimitsPolicy: "limits", jetstream.InterestPolicy: "interest", jetstream.WorkQueuePolicy: "workqueue"}[sc.Retention],
			Discard:   map[jetstream.DiscardPolicy]string{jetstream.DiscardOld: "old", jetstream.DiscardNew: "new"}[sc.Discard],
			Subjects:  sc.Subjects,
		}
		for _, src := range sc.Sources {
			f.Sources = append(f.Sources, SourceFacts{
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
// server behind js (LintStreams): what an operator changed by hand
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
	out = append(out, LintStreams(factsOf(cfg, live), consumedSubjects(cfg, site))...)
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

// Stream kinds for LintStreams.
const (
	StreamOrigin   = "origin"   // the events stream at L1
	StreamEvents   = "events"   // a sourced events stream (hub, edge)
	StreamReceipts = "receipts" // a receipts stream (edge, hub, L1)
	StreamDLQ      = "dlq"      // an edge's dead-letter stream
)

// StreamFacts describe one stream for LintStreams: from leafline's own plan,
// or read from a live server whose streams an operator manages.
type StreamFacts struct {
	Name string
	// Kind is one of the Stream* constants.
	Kind string
	// Retention is "limits", "interest" or "workqueue".
	Retention string
	// Discard is "old" or "new".
	Discard string
	// Subjects are the stream's own subjects.
	Subjects []string
	Sources  []SourceFacts
}

// SourceFacts describe one source of a stream.
type SourceFacts struct {
	// Name is the sourced stream.
	Name string
	// Durable: the source binds to a durable consumer (StreamSource.Consumer).
	Durable bool
	// External: the source is in another JetStream domain, across a
	// leafnode link that can be cut.
	External bool
}

// LintStreams reports streams that can lose or mis-route what leafline
// relies on; consumed are the subjects the site's processing consumes (an
// edge's filter, or the event subjects).
func LintStreams(streams []StreamFacts, consumed []string) []topology.Warning {
	var out []topology.Warning
	for _, s := range streams {
		path := "stream " + s.Name
		for _, src := range s.Sources {
			if src.External && !src.Durable {
				out = append(out, topology.Warning{Path: path, Msg: fmt.Sprintf(
					"sources %s across a link without durable sourcing: after a long cut an ephemeral source takes tens of seconds to resume (a consumer-create request sent during the cut blocks it); bind it to a durable consumer (StreamSource.Consumer)", src.Name)})
			}
		}
		switch s.Kind {
		case StreamReceipts, StreamDLQ:
			if s.Discard == "old" {
				out = append(out, topology.Warning{Path: path, Msg: fmt.Sprintf(
					"%s stream with DiscardOld: when it is full, the oldest records are deleted silently, before they reach L1; use DiscardNew, so that publishes fail and the edge holds its ACKs", s.Kind)})
			}
			for _, subj := range s.Subjects {
				for _, c := range consumed {
					if subjects.Check(subj, true) == nil && subjects.Check(c, true) == nil && subjects.Overlap(subj, c) {
						out = append(out, topology.Warning{Path: path, Msg: fmt.Sprintf(
							"%s subject %q overlaps the consumed subject %q: records would be fed back to the sink as events", s.Kind, subj, c)})
					}
				}
			}
		case StreamOrigin:
			switch s.Retention {
			case "workqueue", "interest":
				out = append(out, topology.Warning{Path: path, Msg: fmt.Sprintf(
					"origin stream with %s retention: the server deletes an event once its consumers have ACKed it (the hub's source ACKs on receipt), which says nothing about the edges; a receipt can then refer to an event no longer at L1, and a re-sourced hub cannot get it back. Use limits retention", s.Retention)})
			}
		}
	}
	return out
}
