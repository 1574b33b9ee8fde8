package edge

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// sinkConsumer is the durable pull consumer the sink runner fetches from:
// the edge's own copy of the events (the sourced stream in its domain).
func (a *App) sinkConsumer(ctx context.Context) (jetstream.Consumer, error) {
	return a.js.Consumer(ctx, a.cfg.Topology.Events.EdgeStream, a.cfg.Delivery.Consumer)
}
