package edge

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
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
