package edge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
)

// The link permissions let a direct-mode edge create and update its own
// consumer on the origin stream (topology.DirectPermissions), and no
// permission can look inside a request: the edge chooses the consumer's
// configuration. L1 therefore checks each direct edge's consumer, when it
// starts and every directGuardEvery, against what an edge's box creates,
// and repairs in place what it can. What it checks is the shape no box
// config changes: a durable pull consumer (no deliver subject: a push
// consumer would deliver the edge's events elsewhere in L1's account) that
// never expires (an inactive threshold lets the server delete it, and the
// record of what the edge has ACKed with it), on the edge's filter, with
// explicit ACKs from the first event. Box-local settings (AckWait,
// MaxAckPending, MaxDeliver) are the edge's own.

// directGuardEvery is how often L1 checks the direct edges' consumers.
const directGuardEvery = 5 * time.Second

// directConsumerProblems lists how have differs from the shape an edge's
// box gives its consumer, and returns the config with the in-place
// repairable fields set back (repaired is false when nothing needs it).
func directConsumerProblems(have jetstream.ConsumerConfig, edge *topology.Site) (problems []string, fixed jetstream.ConsumerConfig, repaired bool) {
	fixed = have
	add := func(repairable bool, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if !repairable {
			msg += " (cannot be changed in place: delete the consumer, and the edge creates it again)"
		}
		problems = append(problems, msg)
		repaired = repaired || repairable
	}
	if have.InactiveThreshold != 0 {
		add(true, "inactive_threshold %s: the server would delete it", have.InactiveThreshold)
		fixed.InactiveThreshold = 0
	}
	if have.FilterSubject != edge.Filter || len(have.FilterSubjects) > 0 {
		add(true, "filter %q%v, not the edge's %q", have.FilterSubject, have.FilterSubjects, edge.Filter)
		fixed.FilterSubject, fixed.FilterSubjects = edge.Filter, nil
	}
	if have.HeadersOnly {
		add(true, "headers_only: the sink would get no payloads")
		fixed.HeadersOnly = false
	}
	if have.DeliverSubject != "" {
		add(false, "push consumer delivering to %s", have.DeliverSubject)
	}
	if have.AckPolicy != jetstream.AckExplicitPolicy {
		add(false, "ack policy %s", have.AckPolicy)
	}
	if have.DeliverPolicy != jetstream.DeliverAllPolicy {
		add(false, "deliver policy %s", have.DeliverPolicy)
	}
	return problems, fixed, repaired
}

// guardDirectConsumers checks and repairs the direct edges' consumers
// until ctx is done.
func (a *App) guardDirectConsumers(ctx context.Context) {
	var edges []*topology.Site
	for _, e := range a.cfg.Topology.Edges() {
		if e.Direct() {
			edges = append(edges, e)
		}
	}
	if len(edges) == 0 {
		return
	}
	tick := time.NewTicker(directGuardEvery)
	defer tick.Stop()
	for {
		for _, e := range edges {
			a.guardDirectConsumer(ctx, e)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *App) guardDirectConsumer(ctx context.Context, edge *topology.Site) {
	stream, name := a.cfg.Topology.Events.OriginStream, topology.DirectConsumerName(edge.Name)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := a.js.Consumer(cctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return // the edge creates it
	}
	if err != nil {
		a.log.Debug("direct consumer check", "edge", edge.Name, "err", err)
		return
	}
	problems, fixed, repairable := directConsumerProblems(c.CachedInfo().Config, edge)
	if len(problems) == 0 {
		return
	}
	a.metrics.sec.directAltered.WithLabelValues(edge.Name).Inc()
	attrs := []any{"edge", edge.Name, "consumer", name, "stream", stream, "problems", strings.Join(problems, "; ")}
	if !repairable {
		a.log.Error("DIRECT CONSUMER ALTERED: an edge's consumer on the origin stream is not the shape its box creates", attrs...)
		return
	}
	if _, err := a.js.UpdateConsumer(cctx, stream, fixed); err != nil {
		a.log.Error("DIRECT CONSUMER ALTERED: an edge's consumer on the origin stream is not the shape its box creates, and repairing it failed", append(attrs, "err", err)...)
		return
	}
	a.log.Error("DIRECT CONSUMER ALTERED: an edge's consumer on the origin stream was not the shape its box creates; repaired in place", attrs...)
}
