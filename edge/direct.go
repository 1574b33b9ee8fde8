package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// Direct delivery mode (topology Site.DeliveryMode "direct"): the edge's
// sink runner consumes the origin stream on L1 itself, through both
// leafnode links, with L1's JetStream API prefix, and ACKs the original
// delivery on L1. L1 creates the consumer (package l1, direct_guard.go); the edge only
// binds to it. The receipt path is unchanged.

const (
	// directStartWait is how long the box, starting, waits for L1 to answer
	// before it goes on without its consumer (and binds to it once L1
	// answers). Within it, an incompatible consumer stops the start.
	directStartWait = 5 * time.Second
	// directAPITimeout bounds one consumer lookup across the links.
	directAPITimeout = 3 * time.Second
	// directRetryPause is how long a fetch waits after L1 could not be
	// reached, so that a runner facing a dead link does not spin.
	directRetryPause = time.Second
	// directRemindEvery repeats the "still unreachable" warning.
	directRemindEvery = time.Minute
)

// ErrUpstreamUnreachable means that a direct-mode edge cannot reach its
// consumer on the origin stream at L1: a link (edge–hub or hub–L1) is down,
// L1 or its stream is not there, L1 has not created the edge's consumer
// (yet), or the links' permissions do not carry direct mode (a hub or L1
// running a topology in which this edge is sourced). The sink runner
// processes nothing meanwhile; it resumes by itself when L1 answers.
var ErrUpstreamUnreachable = errors.New("edge: direct mode: the origin stream on L1 is unreachable")

// errDirectConsumerMissing means that L1 has not created a direct-mode
// edge's consumer (yet).
var errDirectConsumerMissing = errors.New("L1 has not created this edge's consumer")

// directSinkConsumer returns the direct-mode sink consumer. It opens the
// connection the consumer uses (in process, with the edge's own inbox
// prefix, which is all that the links let back to this edge), and waits up
// to directStartWait for L1 to answer. It fails only when the consumer on
// L1 is incompatible (jsplan.ErrIncompatible); when L1 does not answer, or has
// not created the consumer yet, it returns a consumer that binds itself on
// the first fetch that finds it.
func (a *Role) directSinkConsumer(ctx context.Context) (jetstream.Consumer, error) {
	t := a.cfg.Topology
	l1, ok := t.L1()
	if !ok {
		return nil, errors.New("direct mode: the topology has no l1 site")
	}
	nc, err := nats.Connect("", nats.InProcessServer(a.b.Server()),
		nats.Name("leafline-"+a.site.Name+"-direct"),
		nats.CustomInboxPrefix(topology.DirectInboxPrefix(a.site.Name)),
		nats.MaxReconnects(-1), a.b.NATSErrors())
	if err != nil {
		return nil, fmt.Errorf("direct mode: connect to embedded server: %w", err)
	}
	// The connection lives as long as the embedded server.
	srv := a.b.Server()
	go func() { srv.WaitForShutdown(); nc.Close() }()
	js, err := jetstream.NewWithDomain(nc, l1.Domain)
	if err != nil {
		nc.Close()
		return nil, err
	}
	want := jsplan.DirectConsumer(t, a.site)
	d := &directConsumer{
		js:     js,
		nc:     nc,
		stream: t.Events.OriginStream,
		domain: l1.Domain,
		want:   want,
		log: a.log.With("component", "direct", "stream", t.Events.OriginStream,
			"consumer", want.Durable, "domain", l1.Domain),
		pause: directRetryPause,
	}
	deadline := time.Now().Add(directStartWait)
	for {
		_, err := d.current(ctx)
		if err == nil {
			return d, nil
		}
		if errors.Is(err, jsplan.ErrIncompatible) {
			nc.Close()
			return nil, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			d.markDown(err)
			return d, nil
		}
		ctxsleep.For(ctx, 250*time.Millisecond)
	}
}

// directConsumer is a jetstream.Consumer on the origin stream at L1 that
// survives the links: it binds to the durable consumer that L1 created
// when L1 answers, and when L1 does not (or has not created it yet), turns
// each fetch into a pause and an empty batch, logging the outage once (and
// again every directRemindEvery) instead of once per fetch. It never
// creates, changes or deletes the consumer: the links do not let it.
//
// NOTE: only the sink runner's goroutine fetches; status readers may run
// concurrently.
type directConsumer struct {
	js     jetstream.JetStream // on nc, with L1's API prefix
	nc     *nats.Conn
	stream string
	domain string
	want   jetstream.ConsumerConfig
	log    *slog.Logger
	pause  time.Duration

	cons atomic.Pointer[consumerBox] // nil until L1 answered; reset when a fetch finds no responder

	mu        sync.Mutex
	reachable bool
	since     time.Time // when reachable last changed (zero: never known)
	lastWarn  time.Time
	lastErr   string
	failures  atomic.Uint64 // fetches that could not reach L1
}

type consumerBox struct{ c jetstream.Consumer }

// current returns the consumer, looking it up on L1 when it is not known.
func (d *directConsumer) current(ctx context.Context) (jetstream.Consumer, error) {
	if b := d.cons.Load(); b != nil {
		return b.c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, directAPITimeout)
	defer cancel()
	c, err := d.bind(ctx)
	if err != nil {
		return nil, err
	}
	d.cons.Store(&consumerBox{c})
	d.markUp()
	return c, nil
}

// bind looks the consumer up on L1 and refuses one that direct mode
// cannot use. A consumer L1 has not created yet is errDirectConsumerMissing
// (wrapped in ErrUpstreamUnreachable: the runner waits for it).
func (d *directConsumer) bind(ctx context.Context) (jetstream.Consumer, error) {
	name := d.want.Durable
	where := fmt.Sprintf("consumer %s on stream %s in domain %s", name, d.stream, d.domain)
	c, err := d.js.Consumer(ctx, d.stream, name)
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, fmt.Errorf("%w: %s: %w (L1 creates it for each direct-mode edge of its topology: is L1 running a topology in which this edge is direct?)", ErrUpstreamUnreachable, where, errDirectConsumerMissing)
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		return nil, fmt.Errorf("%s: %w: it is a push consumer; direct mode needs a pull consumer", where, jsplan.ErrIncompatible)
	default:
		return nil, d.unreachable(where, err)
	}
	have := c.CachedInfo().Config
	if have.AckPolicy != d.want.AckPolicy {
		return nil, fmt.Errorf("%s: %w: ack policy is %s, direct mode needs %s", where, jsplan.ErrIncompatible, have.AckPolicy, d.want.AckPolicy)
	}
	if have.DeliverPolicy != d.want.DeliverPolicy {
		return nil, fmt.Errorf("%s: %w: deliver policy is %s, direct mode needs %s", where, jsplan.ErrIncompatible, have.DeliverPolicy, d.want.DeliverPolicy)
	}
	return c, nil
}

func (d *directConsumer) unreachable(where string, err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: %s: no responder (a link is down, or the hub's or L1's link permissions do not carry this edge's direct mode): %w", ErrUpstreamUnreachable, where, err)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%w: %s: L1 answered, but has no stream %s (yet): %w", ErrUpstreamUnreachable, where, d.stream, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUpstreamUnreachable, where, err)
}

// Fetch fetches a batch from the consumer on L1. When L1 cannot be reached
// it waits d.pause and returns an empty batch whose Error wraps
// ErrUpstreamUnreachable (the outage is logged here, not per fetch); an
// incompatible consumer is returned as an error wrapping jsplan.ErrIncompatible,
// after the same pause. The batch is read to its end before Fetch returns.
func (d *directConsumer) Fetch(batch int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	c, err := d.current(context.Background())
	if err != nil {
		return d.failed(err)
	}
	b, err := c.Fetch(batch, opts...)
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	berr := b.Error()
	if len(msgs) == 0 && (errors.Is(berr, nats.ErrNoResponders) || errors.Is(berr, jetstream.ErrConsumerDeleted)) {
		// Nobody took the pull request: a link is down, or the consumer
		// is gone. The next fetch looks it up again, which tells which.
		d.cons.Store(nil)
		return d.failed(fmt.Errorf("%w: pull request: %w", ErrUpstreamUnreachable, berr))
	}
	d.markUp()
	return &fixedBatch{msgs: msgs, err: berr}, nil
}

// failed handles a fetch that did not reach the consumer.
func (d *directConsumer) failed(err error) (jetstream.MessageBatch, error) {
	d.failures.Add(1)
	if errors.Is(err, jsplan.ErrIncompatible) {
		d.log.Error("direct mode: the consumer on L1 is incompatible; nothing is processed until an operator fixes or removes it", "err", err)
		d.sleep()
		return nil, err
	}
	d.markDown(err)
	d.sleep()
	return &fixedBatch{err: err}, nil
}

// sleep pauses after a failed fetch, unless the box is closing.
func (d *directConsumer) sleep() {
	if d.nc != nil && d.nc.IsClosed() {
		return
	}
	time.Sleep(d.pause)
}

func (d *directConsumer) markDown(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	d.lastErr = err.Error()
	switch {
	case (d.reachable || d.since.IsZero()) && errors.Is(err, errDirectConsumerMissing):
		d.reachable, d.since, d.lastWarn = false, now, now
		d.log.Warn("direct mode: L1 answers but has not created this edge's consumer on the origin stream; the sink runner processes nothing until it has (events wait on L1)",
			"err", err)
	case d.reachable || d.since.IsZero():
		d.reachable, d.since, d.lastWarn = false, now, now
		d.log.Warn("direct mode: cannot reach the origin stream on L1 through the leafnode links; the sink runner processes nothing until it can (events wait on L1; receipts already committed are still jsplan.Relayed)",
			"err", err)
	case now.Sub(d.lastWarn) >= directRemindEvery:
		d.lastWarn = now
		d.log.Warn("direct mode: the origin stream on L1 is still unreachable; the sink runner is paused",
			"down_for", now.Sub(d.since).Round(time.Second), "err", err)
	}
}

func (d *directConsumer) markUp() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reachable {
		return
	}
	now := time.Now()
	if d.since.IsZero() {
		d.log.Info("direct mode: consuming the origin stream on L1")
	} else {
		d.log.Info("direct mode: the origin stream on L1 is reachable again; the sink runner resumes",
			"down_for", now.Sub(d.since).Round(time.Second))
	}
	d.reachable, d.since, d.lastErr = true, now, ""
}

// FetchBytes implements jetstream.Consumer.
func (d *directConsumer) FetchBytes(maxBytes int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	c, err := d.current(context.Background())
	if err != nil {
		return nil, err
	}
	return c.FetchBytes(maxBytes, opts...)
}

// FetchNoWait implements jetstream.Consumer.
func (d *directConsumer) FetchNoWait(batch int) (jetstream.MessageBatch, error) {
	c, err := d.current(context.Background())
	if err != nil {
		return nil, err
	}
	return c.FetchNoWait(batch)
}

// Consume implements jetstream.Consumer.
func (d *directConsumer) Consume(handler jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	c, err := d.current(context.Background())
	if err != nil {
		return nil, err
	}
	return c.Consume(handler, opts...)
}

// Messages implements jetstream.Consumer.
func (d *directConsumer) Messages(opts ...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	c, err := d.current(context.Background())
	if err != nil {
		return nil, err
	}
	return c.Messages(opts...)
}

// Next implements jetstream.Consumer.
func (d *directConsumer) Next(opts ...jetstream.FetchOpt) (jetstream.Msg, error) {
	c, err := d.current(context.Background())
	if err != nil {
		return nil, err
	}
	return c.Next(opts...)
}

// Info implements jetstream.Consumer.
func (d *directConsumer) Info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	c, err := d.current(ctx)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// CachedInfo returns the consumer's last known info or, before L1 has
// answered, the configuration L1 creates it with.
func (d *directConsumer) CachedInfo() *jetstream.ConsumerInfo {
	if b := d.cons.Load(); b != nil {
		return b.c.CachedInfo()
	}
	return &jetstream.ConsumerInfo{Stream: d.stream, Name: d.want.Durable, Config: d.want}
}

// Close flushes the consumer's connection (ACKs it buffered) to the
// embedded server and closes it. Call it before the server shuts down,
// which closes it otherwise. An ACK lost on the way only means a
// redelivery, which the outbox absorbs.
func (d *directConsumer) Close() {
	if d.nc != nil && !d.nc.IsClosed() {
		_ = d.nc.FlushTimeout(time.Second)
		d.nc.Close()
	}
}

// fixedBatch is a jetstream.MessageBatch already read to its end.
type fixedBatch struct {
	msgs []jetstream.Msg
	err  error
}

func (b *fixedBatch) Messages() <-chan jetstream.Msg {
	ch := make(chan jetstream.Msg, len(b.msgs))
	for _, m := range b.msgs {
		ch <- m
	}
	close(ch)
	return ch
}

func (b *fixedBatch) Error() error { return b.err }

// Status returns the consumer's status.
func (d *directConsumer) Status() box.DirectStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return box.DirectStatus{
		Stream: d.stream, Consumer: d.want.Durable, Domain: d.domain,
		Reachable: d.reachable, Since: d.since, LastError: d.lastErr,
		FailedFetches: d.failures.Load(),
	}
}

// box.DirectStatus returns the status of the box's direct-mode sink consumer,
// and false when the box is not a direct-mode edge (or not started).
//
// NOTE: it reads the box's current runner, which a restart (after a full
// disk) replaces; call it while the box runs, not from a handler that may
// run during a restart (those keep the consumer in an atomic and use
// directStatus).
func (a *Role) DirectStatus() (box.DirectStatus, bool) {
	if a.run == nil {
		return box.DirectStatus{}, false
	}
	return directStatus(a.run.Consumer())
}

// directStatus returns the status of cons when it is a direct-mode sink
// consumer, and false otherwise.
func directStatus(cons jetstream.Consumer) (box.DirectStatus, bool) {
	d, ok := cons.(*directConsumer)
	if !ok || d == nil {
		return box.DirectStatus{}, false
	}
	return d.Status(), true
}

// sinkConn is the connection that the sink consumer's messages belong to:
// the direct-mode consumer's own connection, or def. A request that must be
// answered across the links (a confirmed +TERM on a message's reply subject)
// has to go out on it, since only its inbox prefix is let back to the edge.
func sinkConn(cons jetstream.Consumer, def *nats.Conn) *nats.Conn {
	if d, ok := cons.(*directConsumer); ok && d.nc != nil {
		return d.nc
	}
	return def
}
