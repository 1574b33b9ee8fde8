package l1

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// L1 owns each direct-mode edge's consumer on the origin stream: it creates
// it (jsplan.DirectConsumer) when it starts and whenever it finds it
// missing, and checks it every DirectGuardEvery. The links let an edge only
// look its consumer up, pull and ACK (linkperm.Direct): no edge
// can create, change or delete one. What can still change it is a client of
// L1's own account (an operator, a script). L1 puts back in place what the
// server lets it (settings, filter, inactive threshold, headers only) and
// reports loudly what it cannot (a push consumer, another ACK or deliver
// policy). It never deletes a consumer: the consumer holds the record of
// what its edge has ACKed.

// DirectGuardEvery is how often L1 checks the direct edges' consumers.
const DirectGuardEvery = 5 * time.Second

// directConsumerProblems lists how have differs from want, the consumer L1
// creates, and returns the config with the in-place repairable fields set
// back (repaired is false when nothing needs it).
func directConsumerProblems(have, want jetstream.ConsumerConfig) (problems []string, fixed jetstream.ConsumerConfig, repaired bool) {
	fixed = have
	add := func(repairable bool, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if !repairable {
			msg += " (cannot be changed in place: an operator deletes the consumer at L1, which creates it again; its edge then gets every event again, absorbed by event_id)"
		}
		problems = append(problems, msg)
		repaired = repaired || repairable
	}
	if have.InactiveThreshold != 0 {
		add(true, "inactive_threshold %s: the server would delete it", have.InactiveThreshold)
		fixed.InactiveThreshold = 0
	}
	if have.FilterSubject != want.FilterSubject || !slices.Equal(have.FilterSubjects, want.FilterSubjects) {
		add(true, "filter %q%v, not the edge's %q%v", have.FilterSubject, have.FilterSubjects, want.FilterSubject, want.FilterSubjects)
		fixed.FilterSubject, fixed.FilterSubjects = want.FilterSubject, want.FilterSubjects
	}
	if have.HeadersOnly {
		add(true, "headers_only: the sink would get no payloads")
		fixed.HeadersOnly = false
	}
	if have.AckWait != want.AckWait {
		add(true, "ack_wait %s, not %s", have.AckWait, want.AckWait)
		fixed.AckWait = want.AckWait
	}
	if have.MaxAckPending != want.MaxAckPending {
		add(true, "max_ack_pending %d, not %d", have.MaxAckPending, want.MaxAckPending)
		fixed.MaxAckPending = want.MaxAckPending
	}
	if have.MaxDeliver != want.MaxDeliver {
		add(true, "max_deliver %d, not %d", have.MaxDeliver, want.MaxDeliver)
		fixed.MaxDeliver = want.MaxDeliver
	}
	if have.MaxRequestBatch != want.MaxRequestBatch {
		add(true, "max_batch %d, not %d", have.MaxRequestBatch, want.MaxRequestBatch)
		fixed.MaxRequestBatch = want.MaxRequestBatch
	}
	if have.DeliverSubject != "" {
		add(false, "push consumer delivering to %s", have.DeliverSubject)
	}
	if have.AckPolicy != want.AckPolicy {
		add(false, "ack policy %s", have.AckPolicy)
	}
	if have.DeliverPolicy != want.DeliverPolicy {
		add(false, "deliver policy %s", have.DeliverPolicy)
	}
	return problems, fixed, repaired
}

// guardDirectConsumers creates, checks and repairs the direct edges'
// consumers until ctx is done.
func (a *Role) guardDirectConsumers(ctx context.Context) {
	var edges []*topology.Site
	for _, e := range a.cfg.Topology.Edges() {
		if e.Direct() {
			edges = append(edges, e)
		}
	}
	if len(edges) == 0 {
		return
	}
	seen := map[string]bool{} // the consumers this box has found or created
	tick := time.NewTicker(DirectGuardEvery)
	defer tick.Stop()
	for {
		for _, e := range edges {
			a.guardDirectConsumer(ctx, e, seen)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *Role) guardDirectConsumer(ctx context.Context, edge *topology.Site, seen map[string]bool) {
	t := a.cfg.Topology
	stream, want := t.Events.OriginStream, jsplan.DirectConsumer(t, edge)
	attrs := []any{"edge", edge.Name, "consumer", want.Durable, "stream", stream}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := a.js.Consumer(cctx, stream, want.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		if _, err := a.js.CreateConsumer(cctx, stream, want); err != nil {
			a.log.Warn("direct mode: creating an edge's consumer on the origin stream failed; trying again", append(attrs, "err", err)...)
			return
		}
		if seen[edge.Name] {
			a.metrics.directAltered.WithLabelValues(edge.Name).Inc()
			a.log.Error("DIRECT CONSUMER DELETED: an edge's consumer on the origin stream was deleted at L1, and created again: its edge gets every event again from the start (absorbed by event_id)", attrs...)
		} else {
			a.log.Info("direct mode: created an edge's consumer on the origin stream", attrs...)
		}
		seen[edge.Name] = true
		return
	}
	if err != nil {
		a.log.Debug("direct consumer check", append(attrs, "err", err)...)
		return
	}
	seen[edge.Name] = true
	problems, fixed, repairable := directConsumerProblems(c.CachedInfo().Config, want)
	if len(problems) == 0 {
		return
	}
	a.metrics.directAltered.WithLabelValues(edge.Name).Inc()
	attrs = append(attrs, "problems", strings.Join(problems, "; "))
	if !repairable {
		a.log.Error("DIRECT CONSUMER ALTERED: an edge's consumer on the origin stream is not the shape L1 creates", attrs...)
		return
	}
	if _, err := a.js.UpdateConsumer(cctx, stream, fixed); err != nil {
		a.log.Error("DIRECT CONSUMER ALTERED: an edge's consumer on the origin stream is not the shape L1 creates, and repairing it failed", append(attrs, "err", err)...)
		return
	}
	a.log.Error("DIRECT CONSUMER ALTERED: an edge's consumer on the origin stream was not the shape L1 creates; repaired in place", attrs...)
}
