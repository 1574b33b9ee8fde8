package jsplan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology"
)

// sourceMaxAckPending bounds how many sourced messages may be in flight on
// one link (the durable source consumer's flow-control window).
const sourceMaxAckPending = 10000

// Plan is what a site owns: its streams and the durable consumers it creates
// on them for the sites that take from it.
type Plan struct {
	Streams   []jetstream.StreamConfig
	Consumers []ConsumerPlan
}

// ConsumerPlan is a durable consumer a site creates on one of its
// streams.
type ConsumerPlan struct {
	Stream string
	Config jetstream.ConsumerConfig
	// EitherAck lets an existing consumer with explicit ACKs keep them
	// where Config asks for ACK policy all: its user handles both.
	EitherAck bool
	// Replaces is the consumer that the link's other transport takes the
	// stream with.
	Replaces string
	// StartAfter is a consumer after whose ACK floor this one starts when
	// it is created: a priority class's link starts where the link that
	// carried the class's events before stands.
	StartAfter string
}

// SitePlan derives the streams and consumers of one site from the topology.
//
// Each link takes a stream by its transport (topology.LinkTransport): by
// the relay, whose consumer the owner of the stream creates and the taker
// pulls (package hop), or by durable stream sourcing. For sourcing, the
// owner of the source stream creates a durable push consumer
// (AckFlowControl, 1s heartbeat) per downstream site, and the downstream
// stream binds to it by name. A durable source resumes within about a
// second after a long cut, where an ephemeral one can take tens of seconds
// (its create request, sent during the outage, blocks recovery for its
// timeout plus backoff).
//
// An edge in direct delivery mode (topology Site.DeliveryMode) owns only its
// receipts and DLQ Streams: it has no L2A, and its hub creates no consumer
// on HA for it (the hub keeps HA, which its other edges use and which lets
// an edge switch back with the full history). An L2A left from an earlier
// run is neither used nor deleted.
func SitePlan(cfg *topology.Config, site *topology.Site) Plan {
	pl := &planner{cfg: cfg, t: cfg.Topology, site: site}
	switch site.Role {
	case topology.RoleL1:
		pl.l1()
	case topology.RoleHub:
		pl.hub()
	case topology.RoleEdge:
		pl.edge()
	}
	return pl.p
}

// planner builds the plan of one site.
type planner struct {
	cfg  *topology.Config
	t    *topology.Topology
	site *topology.Site
	p    Plan
}

// base is a stream of the site with the events' duplicate window.
func (pl *planner) base(name string) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:       name,
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Discard:    jetstream.DiscardNew,
		MaxBytes:   pl.cfg.JetStream.MaxStreamBytes,
		Duplicates: pl.t.Events.DuplicateWindow.D(),
	}
}

// sourced is a stream that only takes from a link: no Nats-Msg-Id window.
// The link itself tracks the upstream sequence, and every consumer
// downstream is idempotent by key (the edge's outbox by receipt key, L1 by
// event_id), so a window would only cost memory and CPU on every hop:
// about 190 bytes per message stored in the last window, which a backlog
// catching up after a cut fills with every event.
func (pl *planner) sourced(name string) jetstream.StreamConfig {
	c := pl.base(name)
	c.Duplicates = 0
	return c
}

// serve creates, on a stream this site owns, the consumer that a
// downstream site takes it with, filtered to filters (none: all of it).
func (pl *planner) serve(stream string, down *topology.Site, filters ...string) {
	if Relayed(pl.t, pl.site, down) {
		pl.p.Consumers = append(pl.p.Consumers, ConsumerPlan{Stream: stream, Config: relayConsumerConfig(down, filters...),
			EitherAck: true, Replaces: topology.SourceConsumerName(down.Name)})
		return
	}
	cfg := jetstream.ConsumerConfig{
		Durable:        topology.SourceConsumerName(down.Name),
		Description:    "leafline durable source for " + down.Name,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		MaxAckPending:  sourceMaxAckPending,
		DeliverSubject: topology.SourceDeliverSubject(pl.site.Name, stream, down.Name),
		FlowControl:    true,
		IdleHeartbeat:  time.Second,
	}
	setFilters(&cfg, filters)
	pl.p.Consumers = append(pl.p.Consumers, ConsumerPlan{Stream: stream, Replaces: topology.RelayConsumerName(down.Name), Config: cfg})
}

// setFilters filters c to filters: one as FilterSubject, several as
// FilterSubjects.
func setFilters(c *jetstream.ConsumerConfig, filters []string) {
	c.FilterSubject, c.FilterSubjects = "", nil
	switch len(filters) {
	case 0:
	case 1:
		c.FilterSubject = filters[0]
	default:
		c.FilterSubjects = filters
	}
}

// EdgeFilters are the subjects of the origin stream that edge takes: its
// filter (every event subject when it has none), and what L1 sends again
// to it alone (topology.AddressFilter).
func EdgeFilters(t *topology.Topology, edge *topology.Site) []string {
	f := []string{edge.Filter}
	if edge.Filter == "" {
		f = slices.Clone(t.Events.Subjects)
	}
	return append(f, topology.AddressFilter(edge.Name))
}

// serveLanes creates, on the receipts stream this site owns, the consumer
// of each class lane of its receipts (topology.Topology.ReceiptClasses)
// that down takes by a relay link of its own, on the receipts of sites
// (a site name, or "*"). Each starts after the link of the other
// receipts, which carried the lane's receipts before.
func (pl *planner) serveLanes(stream string, down *topology.Site, sites string) {
	if !Relayed(pl.t, pl.site, down) {
		return
	}
	for _, c := range pl.t.ReceiptClasses(pl.site) {
		cfg := relayConsumerConfig(down, receipt.ClassSubject(pl.t.ReceiptSubject(sites, "*"), c))
		cfg.Durable = topology.RelayClassConsumerName(down.Name, c)
		cfg.Description = "leafline relay of the receipts of class " + c + " for " + down.Name
		pl.p.Consumers = append(pl.p.Consumers, ConsumerPlan{Stream: stream, Config: cfg,
			EitherAck: true, StartAfter: topology.RelayConsumerName(down.Name)})
	}
}

// take makes c take stream from the site from, by the link's transport.
// With sourcing it returns the source, bound to the durable consumer that
// from created for this site; with the relay, nil.
func (pl *planner) take(c *jetstream.StreamConfig, stream string, from *topology.Site) *jetstream.StreamSource {
	if Relayed(pl.t, pl.site, from) {
		relayInto(c, pl.site)
		return nil
	}
	src := &jetstream.StreamSource{
		Name:     stream,
		External: &jetstream.ExternalStream{APIPrefix: topology.APIPrefix(from.Domain)},
		Consumer: &jetstream.StreamConsumerSource{
			Name:           topology.SourceConsumerName(pl.site.Name),
			DeliverSubject: topology.SourceDeliverSubject(from.Name, stream, pl.site.Name),
		},
	}
	c.Sources = append(c.Sources, src)
	return src
}

// l1 plans the origin stream, served to every hub, and the receipts
// stream, taken from every hub.
func (pl *planner) l1() {
	ev, rc := pl.t.Events, pl.t.Receipts
	origin := pl.base(ev.OriginStream)
	// Its events, and what L1 sends again to one edge alone.
	origin.Subjects = append(slices.Clone(ev.Subjects), topology.AddressSpace())
	origin.Description = "leafline origin events"
	origin.AllowAtomicPublish = true // leafline publish writes atomic batches
	r1 := pl.sourced(rc.L1Stream)
	r1.Description = "leafline receipts at L1"
	for _, hub := range pl.t.Downstream(pl.site.Name) {
		pl.serve(ev.OriginStream, hub, "")
		pl.take(&r1, rc.HubStream, hub)
	}
	pl.p.Streams = append(pl.p.Streams, origin, r1)
}

// hub plans the events stream, taken from L1 and served to each edge, and
// the receipts stream, taken from each edge and served to L1.
func (pl *planner) hub() {
	t, ev, rc := pl.t, pl.t.Events, pl.t.Receipts
	up, _ := t.Site(pl.site.Upstream)
	ha := pl.sourced(ev.HubStream)
	ha.Description = "leafline events at hub"
	pl.take(&ha, ev.OriginStream, up)
	rh := pl.sourced(rc.HubStream)
	rh.Description = "leafline receipts at hub"
	for _, e := range t.Downstream(pl.site.Name) {
		// A direct-mode edge consumes L1A itself: nothing for it on HA.
		if !e.Direct() {
			pl.serve(ev.HubStream, e, EdgeFilters(t, e)...)
			for _, c := range t.Classes(e) {
				pl.p.Consumers = append(pl.p.Consumers, ConsumerPlan{Stream: ev.HubStream,
					Config: relayClassConsumerConfig(e, c), EitherAck: true, StartAfter: topology.RelayConsumerName(e.Name)})
			}
		}
		// Each edge's link carries only its own site's receipts
		// (ReceiptBinding).
		if src := pl.take(&rh, rc.EdgeStream, e); src != nil {
			from, to := ReceiptBinding(t, e.Name)
			src.SubjectTransforms = []jetstream.SubjectTransformConfig{{Source: from, Destination: to}}
		}
	}
	pl.serve(rc.HubStream, up, "")
	pl.serveLanes(rc.HubStream, up, "*")
	pl.p.Streams = append(pl.p.Streams, ha, rh)
}

// edge plans the events stream taken from the hub with the sink's
// consumer on it, the receipts stream served to the hub, and the DLQ.
func (pl *planner) edge() {
	t, ev, rc, site := pl.t, pl.t.Events, pl.t.Receipts, pl.site
	up, _ := t.Site(site.Upstream)
	// A direct-mode edge has no events stream of its own: its sink
	// consumer lives on L1A at L1 and is reconciled by the box itself
	// through the links (package edge, direct.go), not by this plan, so that the
	// box starts while L1 is unreachable.
	if !site.Direct() {
		l2 := pl.sourced(ev.EdgeStream)
		l2.Description = "leafline events at edge"
		pl.take(&l2, ev.HubStream, up)
		pl.p.Streams = append(pl.p.Streams, l2)
		// Each priority class comes by its own relay link into a
		// stream of its own (Topology.Classes; the relay only).
		for _, c := range t.Classes(site) {
			cs := pl.sourced(c.Stream)
			cs.Description = "leafline events of class " + c.Name + " at edge"
			relayInto(&cs, site)
			pl.p.Streams = append(pl.p.Streams, cs)
		}
	}
	re := pl.base(rc.EdgeStream)
	re.Description = "leafline receipts at edge"
	re.Subjects = []string{t.ReceiptFilter(site.Name)}
	// Receipts are written in atomic batches: one fsync per batch.
	re.AllowAtomicPublish = true
	re.Duplicates = rc.DuplicateWindow.D()
	pl.serve(rc.EdgeStream, up, "")
	pl.serveLanes(rc.EdgeStream, up, site.Name)
	pl.p.Streams = append(pl.p.Streams, re)
	if dl := pl.cfg.DeadLetter; dl.Enabled {
		dlq := pl.base(dl.Stream)
		dlq.Description = "leafline dead letters"
		dlq.Subjects = []string{dl.Subject}
		pl.p.Streams = append(pl.p.Streams, dlq)
	}
	if !site.Direct() {
		pl.p.Consumers = append(pl.p.Consumers, ConsumerPlan{Stream: ev.EdgeStream, Config: SinkConsumerConfig(pl.cfg)})
		for _, c := range t.Classes(site) {
			pl.p.Consumers = append(pl.p.Consumers, ConsumerPlan{Stream: c.Stream, Config: SinkConsumerConfig(pl.cfg)})
		}
	}
}

// SinkConsumerConfig is the edge's durable pull consumer on its events stream.
func SinkConsumerConfig(cfg *topology.Config) jetstream.ConsumerConfig {
	d := cfg.Delivery
	c := jetstream.ConsumerConfig{
		Durable:       d.Consumer,
		Description:   "leafline sink runner",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.AckWait.D(),
		MaxAckPending: d.MaxAckPending,
		MaxDeliver:    -1,
		// A pull request may ask for a whole batch at once.
		MaxRequestBatch: d.BacklogBatchSize,
	}
	// With max_deliver_action dead_letter the runner enforces the limit
	// itself (a DLQ publish failing on the last delivery must not let the
	// server drop the message); with leave, the server does.
	if d.MaxDeliver > 0 && d.MaxDeliverAction != "dead_letter" {
		c.MaxDeliver = d.MaxDeliver
	}
	return c
}

// ErrIncompatible means an existing stream or consumer differs from the
// configuration in a way that would need it recreated or purged. leafline
// never does either: the operator migrates it by hand.
var ErrIncompatible = errors.New("existing JetStream asset is incompatible with the configuration")

// Reconcile creates the plan's streams and consumers, or updates them in
// place. It never recreates or purges anything, and deletes only the
// consumer of a link's other transport once the link's own exists
// (see box/switch.go): no stream, and no message.
func Reconcile(ctx context.Context, js jetstream.JetStream, p Plan) error {
	for _, want := range p.Streams {
		if err := reconcileStream(ctx, js, want); err != nil {
			return err
		}
	}
	for _, c := range p.Consumers {
		if err := reconcileConsumer(ctx, js, c); err != nil {
			return err
		}
	}
	return nil
}

// reconcileConsumer creates c's consumer or updates it in place. An
// existing consumer keeps what the server cannot change in place and its
// user handles either way: explicit ACKs (eitherAck), and the start
// sequence it was created with. A taker consumer created while the
// consumer of the link's other transport exists starts after that one's
// ACK floor, which is then deleted (see box/switch.go).
func reconcileConsumer(ctx context.Context, js jetstream.JetStream, c ConsumerPlan) error {
	cfg := c.Config
	if c.EitherAck || c.Replaces != "" || c.StartAfter != "" {
		have, err := anyConsumerInfo(ctx, js, c.Stream, cfg.Durable)
		switch {
		case err == nil:
			hc := have.Config
			if c.EitherAck && hc.AckPolicy == jetstream.AckExplicitPolicy {
				cfg.AckPolicy = jetstream.AckExplicitPolicy
			}
			if hc.DeliverPolicy == jetstream.DeliverByStartSequencePolicy {
				cfg.DeliverPolicy, cfg.OptStartSeq = hc.DeliverPolicy, hc.OptStartSeq
			}
		case errors.Is(err, jetstream.ErrConsumerNotFound) && (c.Replaces != "" || c.StartAfter != ""):
			floor, err := ackFloor(ctx, js, c.Stream, cmp.Or(c.Replaces, c.StartAfter))
			if err != nil {
				return err
			}
			if floor > 0 {
				cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, floor+1
			}
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return fmt.Errorf("consumer %s on stream %s: %w", cfg.Durable, c.Stream, err)
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, c.Stream, cfg); err != nil {
		return fmt.Errorf("consumer %s on stream %s: %w", cfg.Durable, c.Stream, refused(err))
	}
	if c.Replaces == "" {
		return nil
	}
	if err := js.DeleteConsumer(ctx, c.Stream, c.Replaces); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("remove consumer %s of the link's other transport from stream %s: %w", c.Replaces, c.Stream, err)
	}
	return nil
}

// ackFloor is the ACK floor's stream sequence of the named consumer, or 0
// if it does not exist.
func ackFloor(ctx context.Context, js jetstream.JetStream, stream, name string) (uint64, error) {
	old, err := anyConsumerInfo(ctx, js, stream, name)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("consumer %s on stream %s: %w", name, stream, err)
	}
	return old.AckFloor.Stream, nil
}

// anyConsumerInfo is the info of the named consumer, pull or push.
func anyConsumerInfo(ctx context.Context, js jetstream.JetStream, stream, name string) (*jetstream.ConsumerInfo, error) {
	c, err := js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrNotPullConsumer) {
		pc, err := js.PushConsumer(ctx, stream, name)
		if err != nil {
			return nil, err
		}
		return pc.CachedInfo(), nil
	}
	if err != nil {
		return nil, err
	}
	return c.CachedInfo(), nil
}

func reconcileStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("stream %s: %w", want.Name, err)
	}
	have := s.CachedInfo().Config
	if have.Retention != want.Retention || have.Storage != want.Storage {
		return fmt.Errorf("stream %s: %w: retention/storage is %s/%s, configuration wants %s/%s",
			want.Name, ErrIncompatible, have.Retention, have.Storage, want.Retention, want.Storage)
	}
	if have.Discard != want.Discard {
		return fmt.Errorf("stream %s: %w: discard policy is %s, configuration wants %s (a receipts or events stream must never drop old messages)",
			want.Name, ErrIncompatible, have.Discard, want.Discard)
	}
	if _, err := js.UpdateStream(ctx, want); err != nil {
		return fmt.Errorf("stream %s: %w", want.Name, refused(err))
	}
	return nil
}

// refused classifies a failed create-or-update: the server refusing the
// configuration (a 4xx API error) is ErrIncompatible; a server-side failure
// (5xx, e.g. a full disk writing the new metadata) or a timeout is not, and
// keeps its cause.
func refused(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 {
		return fmt.Errorf("%w: %w", ErrIncompatible, err)
	}
	return fmt.Errorf("update failed: %w", err)
}
