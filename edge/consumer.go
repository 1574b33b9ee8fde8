package edge

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
)

// sinkConsumer is the durable pull consumer the sink runner fetches from:
// the edge's own copy of the events (the sourced stream in its domain) or,
// for an edge in direct delivery mode, its consumer on the origin stream at
// L1, reached through the leafnode links (see direct.go).
func (a *Role) sinkConsumer(ctx context.Context) (jetstream.Consumer, error) {
	if a.site.Direct() {
		return a.directSinkConsumer(ctx)
	}
	return a.js.Consumer(ctx, a.cfg.Topology.Events.EdgeStream, a.cfg.Delivery.Consumer)
}

// classConsumers are the sink consumers of the edge's priority classes,
// most urgent first (runner.Options.Classes). After them come those of a
// class the topology no longer names whose stream still holds events for
// the runner: it drains them (before normal events, as before), and then
// the stream is left as it is.
func (a *Role) classConsumers(ctx context.Context) ([]jetstream.Consumer, error) {
	var out []jetstream.Consumer
	var configured []string
	for _, c := range a.cfg.Topology.Classes(a.site) {
		cc, err := a.js.Consumer(ctx, c.Stream, a.cfg.Delivery.Consumer)
		if err != nil {
			return nil, fmt.Errorf("sink consumer of class %s: %w", c.Name, err)
		}
		out, configured = append(out, cc), append(configured, c.Stream)
	}
	if a.site.Direct() {
		return out, nil
	}
	prefix := a.cfg.Topology.Events.EdgeStream + "_"
	names := a.js.StreamNames(ctx)
	for name := range names.Name() {
		if !strings.HasPrefix(name, prefix) || slices.Contains(configured, name) {
			continue
		}
		cc, err := a.js.Consumer(ctx, name, a.cfg.Delivery.Consumer)
		if err != nil {
			continue // not a class's stream: the runner has no consumer there
		}
		if info := cc.CachedInfo(); info.NumPending+uint64(info.NumAckPending) > 0 {
			a.log.Warn("a priority class no longer in the topology left events in its stream; the runner drains them before normal events",
				"stream", name, "pending", info.NumPending, "unacked", info.NumAckPending)
			out = append(out, cc)
		}
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	return out, nil
}

// countWaiting sets, for the events stream and each priority class's, the
// events the runner has not ACKed yet (its consumer's pending and unACKed).
func (a *Role) countWaiting(ctx context.Context) {
	if a.site.Direct() {
		return
	}
	t := a.cfg.Topology
	streams := map[string]string{topology.NormalClass: t.Events.EdgeStream}
	for _, c := range t.Classes(a.site) {
		streams[c.Name] = c.Stream
	}
	for class, stream := range streams {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := a.js.Consumer(cctx, stream, a.cfg.Delivery.Consumer)
		cancel()
		if err != nil {
			continue
		}
		info := c.CachedInfo()
		a.metrics.eventsWaiting.WithLabelValues(class).Set(float64(info.NumPending + uint64(info.NumAckPending)))
	}
}
