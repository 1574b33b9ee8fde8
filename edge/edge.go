package edge

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// Role is the edge role of a box: the outbox, the sink runner with its
// consumer, sink and receipt publishers, and the outbox relay. Make it with
// New and give it to box.New.
type Role struct {
	box.BaseRole
	b       *box.App
	cfg     *topology.Config
	site    *topology.Site
	log     *slog.Logger
	metrics *metrics
	opts    options

	nc     *nats.Conn
	js     jetstream.JetStream
	pubNC  *nats.Conn // the runner's second receipt publisher
	ob     *outbox.Outbox
	signer nkeys.KeyPair // the edge's receipt-signing key, if configured
	run    *runner.Runner

	// opened is the sink the config names, when the role opened it (not
	// one given with WithSink or WithTxSink, which the caller owns).
	opened sink.Opened
	// wrote is signalled (without blocking) after each outbox transaction
	// of the runner: releaseMapped then looks at the pages it mapped.
	wrote chan struct{}
	// opsDirect is the current direct-mode sink consumer, for /readyz.
	opsDirect atomic.Pointer[directConsumer]
}

// New returns the edge role.
func New(opts ...Option) *Role {
	r := &Role{wrote: make(chan struct{}, 1)}
	for _, o := range opts {
		o(&r.opts)
	}
	return r
}

// Init keeps the box and registers the role's metrics.
func (a *Role) Init(b *box.App) error {
	a.b, a.cfg, a.site, a.log = b, b.Config(), b.Site(), b.Log()
	a.metrics = newMetrics(b.Metrics())
	return nil
}

// Outbox is the edge's outbox (while the box runs).
func (a *Role) Outbox() *outbox.Outbox { return a.ob }

// WatchDirs is the file sink's directory, when the role opens that sink
// from its config.
func (a *Role) WatchDirs() []string {
	if a.opts.sink == nil && a.opts.txSink == nil && a.cfg.Sink.Type == "file" && a.cfg.Sink.Dir != "" {
		return []string{a.cfg.Sink.Dir}
	}
	return nil
}

// Readiness reports a direct-mode edge's consumer on L1.
func (a *Role) Readiness(r *box.Readiness) {
	if d := a.opsDirect.Load(); d != nil {
		st := d.Status()
		r.Direct = &st
	}
}

// Loops runs the sink runner, the outbox relay, the outbox's upkeep and the
// release of its mapped pages.
func (a *Role) Loops(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return a.run.Run(ctx) })
	relay := outbox.NewRelay(a.ob, &receiptPublisher{js: a.js, signer: a.signer}, outbox.RelayConfig{
		Interval:    a.cfg.Outbox.RelayInterval.D(),
		MinAge:      topology.RelayMinAge,
		Timeout:     a.cfg.Outbox.PublishTimeout.D(),
		Logger:      a.log.With("component", "relay"),
		OnPublished: func(n int) { a.metrics.relayPublished.Add(float64(n)) },
		OnError:     func(error) { a.metrics.relayErrors.Inc() },
	})
	g.Go(func() error { return relay.Run(ctx) })
	g.Go(func() error { a.releaseMapped(ctx); return nil })
	g.Go(func() error { a.upkeep(ctx); return nil })
}

// Stop closes the direct consumer's connection (flushing the ACKs it
// buffered) and the sink the role opened, once the runner has stopped
// writing and before the connection a nats sink uses goes.
func (a *Role) Stop() {
	a.opsDirect.Store(nil)
	if a.run != nil {
		if c, ok := a.run.Consumer().(interface{ Close() }); ok {
			c.Close()
		}
	}
	if err := a.opened.Close(); err != nil {
		a.log.Warn("sink close", "err", err)
	}
	a.opened = sink.Opened{}
	if a.pubNC != nil {
		a.pubNC.Close()
	}
}

// Closed closes the outbox, once the server that took its receipts is down.
func (a *Role) Closed() {
	if a.ob != nil {
		if err := a.ob.Close(); err != nil {
			a.log.Warn("outbox close", "err", err)
		}
	}
	a.nc, a.js, a.pubNC, a.ob, a.run, a.signer = nil, nil, nil, nil, nil, nil
}

// Crash closes the second receipt publisher's connection.
func (a *Role) Crash() {
	if a.pubNC != nil {
		a.pubNC.Close()
	}
}

// Start checks the outbox and builds the sink runner: its consumer,
// sink, and the two receipt publishers.
func (a *Role) Start(ctx context.Context) error {
	// The box's config, which a reload may have changed since Init.
	a.cfg, a.site = a.b.Config(), a.b.Site()
	a.nc, a.js = a.b.Conn(), a.b.JetStream()
	cfg := a.cfg
	ob := a.ob // opened first, by start
	var err error
	// A full integrity check (record checksums included) before anything
	// is published from the file: a corrupt outbox stops the box with the
	// file named, and is never replaced by an empty one.
	if err := ob.Check(); err != nil {
		return err
	}
	if cfg.Signing.KeyFile != "" {
		if a.signer, err = loadSigner(cfg.Signing.KeyFile, a.site.ReceiptKey); err != nil {
			return err
		}
	}
	cons, err := a.sinkConsumer(ctx)
	if err != nil {
		return fmt.Errorf("sink consumer: %w", err)
	}
	classes, err := a.classConsumers(ctx)
	if err != nil {
		return err
	}
	// The server stages one atomic batch at a time per connection: a
	// second connection lets the runner's second publisher overlap its
	// batch with the first's (runner.Options.Publishers).
	if a.pubNC, err = nats.Connect("", nats.InProcessServer(a.b.Server()), nats.Name("leafline-"+a.site.Name+"-receipts"),
		nats.MaxReconnects(-1), a.b.NATSErrors()); err != nil {
		return fmt.Errorf("connect to embedded server: %w", err)
	}
	js2, err := jetstream.New(a.pubNC)
	if err != nil {
		return err
	}
	progress, err := inProgressInterval(cfg.Delivery, cons.CachedInfo().Config.AckWait)
	if err != nil {
		return err
	}
	prefix, maxBundle := cfg.Topology.Receipts.SubjectPrefix, bundleBytes(cfg.Topology.LinkBandwidth(a.site))
	ro := runner.Options{
		Config:   cfg,
		Site:     a.site.Name,
		NC:       sinkConn(cons, a.nc), // a direct consumer's own connection
		JS:       a.js,
		Progress: progress,
		Consumer: cons,
		Classes:  classes,
		Outbox:   ob,
		Publishers: []outbox.Publisher{
			&receiptPublisher{js: a.js, signer: a.signer, prefix: prefix, maxBytes: maxBundle},
			&receiptPublisher{js: js2, signer: a.signer, prefix: prefix, maxBytes: maxBundle},
		},
		ReceiptClasses: cfg.Topology.ReceiptClasses(a.site),
		Metrics:        a.metrics.runner(),
		Log:            a.log.With("component", "runner"),
		Wrote:          a.wrote,
		Hooks:          a.opts.runnerHooks,
	}
	switch {
	case a.opts.sink != nil:
		ro.Sink = a.opts.sink
	case a.opts.txSink != nil:
		ro.TxSink = a.opts.txSink
	default:
		if a.opened, err = sink.Open(cfg.Sink, sink.Deps{NC: a.nc, Log: a.log, Count: a.metrics.sink()}); err != nil {
			return err
		}
		ro.Sink, ro.TxSink = a.opened.Sink, a.opened.TxSink
	}
	if a.run, err = runner.New(ro); err != nil {
		return err
	}
	if d, ok := cons.(*directConsumer); ok {
		a.opsDirect.Store(d)
	}
	return nil
}

// loadSigner reads the edge's nkey seed and checks that it is the key the
// topology publishes for this site, so that L1 will verify what it signs.
func loadSigner(path, want string) (nkeys.KeyPair, error) {
	seed, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing.key_file: %w", err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		return nil, fmt.Errorf("signing.key_file %s: not an nkey seed: %w", path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("signing.key_file %s: %w", path, err)
	}
	if pub != want {
		return nil, fmt.Errorf("signing.key_file %s: its public key %s is not this site's receipt_key %s in the topology", path, pub, want)
	}
	return kp, nil
}

// inProgressInterval is the InProgress heartbeat interval, checked against
// the consumer's real AckWait: a heartbeat must arrive well before the
// server would redeliver.
func inProgressInterval(d topology.DeliveryConfig, ackWait time.Duration) (time.Duration, error) {
	if !d.InProgress.Enabled {
		return 0, nil
	}
	iv := time.Duration(d.InProgress.IntervalMS) * time.Millisecond
	if iv == 0 {
		iv = ackWait / 3
	}
	if iv <= 0 || float64(iv) >= 0.8*float64(ackWait) {
		return 0, fmt.Errorf("delivery.in_progress.interval_ms: %s must be below 80%% of the consumer's AckWait (%s)", iv, ackWait)
	}
	return iv, nil
}

// releaseEvery is how often the edge looks at its mapping of outbox
// pages when the runner writes none (the relay's and the ops endpoints'
// reads).
const releaseEvery = time.Second

// mappedBudget is how far the process's resident file pages may grow
// above what they were after the last release before the outbox's
// mapping is released again.
const mappedBudget = 64 << 20

// releaseMapped bounds the outbox pages that stay resident: with random
// keys every commit touches new pages of the file's memory map (the
// kernel maps 16 pages around each one read), and without a release the
// edge's resident set grows to the size of the file (see
// outbox.ReleaseMapped; the pages stay in the page cache). Each release
// costs the next transactions a minor fault for every page they read
// again, so the edge releases only once the resident file pages have grown
// by mappedBudget since the last release (where that cannot be read, after
// each of the runner's transactions). The check runs off the runner's
// path.
func (a *Role) releaseMapped(ctx context.Context) {
	tick := time.NewTicker(releaseEvery)
	defer tick.Stop()
	base, known := residentFileBytes()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wrote:
		case <-tick.C:
		}
		if now, ok := residentFileBytes(); ok && known && now-base < mappedBudget {
			continue
		}
		if err := a.ob.ReleaseMapped(); err != nil {
			a.log.Debug("outbox: release mapped pages", "err", err)
		}
		base, known = residentFileBytes()
	}
}

// pruneBatch bounds the published receipts one outbox prune deletes.
const pruneBatch = 10000

// upkeep refreshes the outbox's pending gauge and the events waiting in
// each class every second, and prunes the published receipts older than
// outbox.retention every hour: one transaction of at most pruneBatch
// records a tick, a tick after another until one finds fewer, so that
// the outbox keeps its retention whatever
// the rate of receipts.
func (a *Role) upkeep(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastPrune := time.Time{}
	for {
		if st, err := a.ob.Stats(); err == nil {
			a.metrics.outboxPending.Set(float64(st.Pending))
		}
		a.countWaiting(ctx)
		if time.Since(lastPrune) > time.Hour {
			n, err := a.ob.Prune(time.Now().Add(-a.cfg.Outbox.Retention.D()), pruneBatch)
			if err != nil || n < pruneBatch {
				lastPrune = time.Now()
			}
			if err != nil {
				a.log.Warn("outbox prune failed", "err", err)
			} else if n > 0 {
				a.log.Info("outbox pruned", "records", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
