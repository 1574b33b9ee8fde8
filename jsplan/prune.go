package jsplan

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
)

// Prune deletes, from the events stream of a hub, the consumers of edges
// that are no longer its own: retired (sites[].retired), moved to another
// hub, or removed from the topology. Each held the stream for its edge,
// which will never take it again: the trim then keeps every message
// after it. What such an edge had not taken is not lost: L1 closes its
// pending events when it is retired or removed, and sends them to it
// through its new hub when it moved (a release, see Release).
//
// A consumer is an edge's when it is the edge's relay or source consumer,
// or one of its priority classes' (topology.RelayClassConsumerName); one
// that names no site of the topology, in those forms, belongs to a site
// removed from it. A consumer of one of the hub's edges is kept, also when
// the plan does not name it (a class the edge no longer takes: its link
// may still hold events the edge's other links skipped). It returns the
// consumers deleted.
func Prune(ctx context.Context, js jetstream.JetStream, cfg *topology.Config, site *topology.Site) ([]string, error) {
	if site.Role != topology.RoleHub {
		return nil, nil
	}
	t := cfg.Topology
	stream := t.Events.HubStream
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	var out []string
	names := s.ConsumerNames(ctx)
	var stale []string
	for name := range names.Name() {
		if staleConsumer(t, site, name) {
			stale = append(stale, name)
		}
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("stream %s: consumers: %w", stream, err)
	}
	for _, name := range stale {
		if err := s.DeleteConsumer(ctx, name); err != nil {
			return out, fmt.Errorf("stream %s: delete consumer %s: %w", stream, name, err)
		}
		out = append(out, name)
	}
	return out, nil
}

// staleConsumer reports whether the consumer name, on the events stream
// of hub, belongs to an edge that is no longer one of hub's.
func staleConsumer(t *topology.Topology, hub *topology.Site, name string) bool {
	relay, src := topology.RelayConsumerName(""), topology.SourceConsumerName("")
	if !strings.HasPrefix(name, relay) && !strings.HasPrefix(name, src) {
		return false // not a link's
	}
	owner := ""
	for _, s := range t.Sites {
		n := s.Name
		if (name == topology.RelayConsumerName(n) || name == topology.SourceConsumerName(n) ||
			strings.HasPrefix(name, topology.RelayConsumerName(n)+"-")) && len(n) > len(owner) {
			owner = n
		}
	}
	return !slices.ContainsFunc(t.Downstream(hub.Name), func(e *topology.Site) bool { return e.Name == owner })
}
