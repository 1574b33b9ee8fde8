package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/dirsync"
	"github.com/leafline/leafline/internal/logx"
	"github.com/leafline/leafline/outbox"

	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/status/console"
	"github.com/leafline/leafline/topology"
)

// App is one leafline box: an embedded nats-server plus what the site's role
// runs on it. Create it with New, then call Run.
type App struct {
	cfg     *topology.Config
	site    *topology.Site
	log     *slog.Logger
	metrics *Metrics
	opts    options

	srv    *server.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	pubNC  *nats.Conn // the runner's second receipt publisher (edge only)
	ob     *outbox.Outbox
	svc    *completion.Service
	state  *state.State  // L1's completion state (the Service records in it)
	signer nkeys.KeyPair // the edge's receipt-signing key, if configured
	micro  micro.Service
	run    *runner.Runner

	cleaner *cleanup.Cleaner // L1 with completion.cleanup enabled

	// held are the sources of links switched from the relay to sourcing
	// that wait to be positioned (switch.go).
	held []heldSource

	// opened is the sink the config names, when the box opened it (not
	// one given with WithSink or WithTxSink, which the caller owns).
	opened sink.Opened
	// wrote is signalled (without blocking) after each outbox transaction
	// of the runner: releaseMapped then looks at the pages it mapped.
	wrote chan struct{}
	// noSpace carries a store write that the embedded server logged as
	// failed for lack of space (storeFailed) to monitor.
	noSpace chan string

	opsLn     net.Listener
	opsFailed atomic.Value                    // error: the ops server failed
	opsSrv    atomic.Pointer[server.Server]   // the current server, for the ops handlers
	opsL1     atomic.Pointer[l1Ops]           // the current completion service and its status API
	opsFleet  atomic.Pointer[console.Console] // the current L1 console (role_l1_fleet.go)
	opsDirect atomic.Pointer[directConsumer]  // the current direct-mode sink consumer
	opsState  atomic.Pointer[state.State]     // L1's current completion state
	ready     chan struct{}
	readyOnce sync.Once
	isReady   atomic.Bool
	notReady  atomic.Value // string: why the box is not ready
	crashed   atomic.Bool  // Crash was called
	closed    sync.Once
}

// New checks the configuration and prepares an App. It starts nothing.
func New(cfg *topology.Config, log *slog.Logger, opts ...Option) (*App, error) {
	if cfg == nil || cfg.Topology == nil {
		return nil, errors.New("edge: configuration has no topology")
	}
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return nil, fmt.Errorf("edge: site %q is not in the topology", cfg.Site)
	}
	if log == nil {
		log = slog.Default()
	}
	// Each key once per line: components add keys that the messages they
	// log repeat ("stream", "sink").
	log = slog.New(logx.Unique(log.Handler()))
	a := &App{
		cfg:     cfg,
		site:    site,
		log:     log.With("site", site.Name, "role", string(site.Role)),
		metrics: newMetrics(site.Name, string(site.Role)),
		ready:   make(chan struct{}),
		wrote:   make(chan struct{}, 1),
		noSpace: make(chan string, 1),
	}
	for _, o := range opts {
		o(&a.opts)
	}
	a.notReady.Store("starting")
	return a, nil
}

// Ready is closed once Run has started everything and the box serves.
func (a *App) Ready() <-chan struct{} { return a.ready }

// Metrics returns the box's metrics.
func (a *App) Metrics() *Metrics { return a.metrics }

// ClientURL is the embedded server's client URL (valid after Ready).
// In cluster mode it is the cluster's URLs.
func (a *App) ClientURL() string {
	if a.srv == nil {
		return a.cfg.Cluster.ClusterURL()
	}
	return a.srv.ClientURL()
}

// Server is the embedded server (valid after Ready).
func (a *App) Server() *server.Server { return a.srv }

// OpsAddr is the ops HTTP address (valid after Ready).
func (a *App) OpsAddr() string { return a.opsLn.Addr().String() }

// Outbox is the edge's outbox (valid after Ready; nil on other roles).
func (a *App) Outbox() *outbox.Outbox { return a.ob }

// Completions is the L1 completion service (valid after Ready; nil on other roles).
func (a *App) Completions() *completion.Service { return a.svc }

// Run starts the box and blocks until ctx is done or a fatal error occurs.
// It returns nil on a clean stop. Shutdown, in order: the sink runner
// finishes (or abandons, unacked) its current batch; the relay and the
// completion service stop; the ops endpoint closes; the NATS connection
// drains; the embedded server shuts down; the outbox closes.
//
// A full disk is not fatal (see storage.go): the box stops everything but
// its ops endpoint, waits for free space and starts again on the same data
// dir.
func (a *App) Run(ctx context.Context) error {
	var release func() // the data dir's lock, released after everything else
	defer func() {
		if release != nil {
			release()
		}
	}()
	defer a.close()
	// The ops listener first: a busy port fails before any state changes.
	// It serves for the whole run, also while the box waits for disk space.
	var err error
	if a.opsLn, err = net.Listen("tcp", a.cfg.Ops.Listen); err != nil {
		return fmt.Errorf("ops.listen: %w", err)
	}
	// Then the data dir's lock: a second box on the same data dir, of any
	// role, stops here, before it starts a server on the first one's store.
	if release, err = lockDataDir(a.cfg.DataDir); err != nil {
		return err
	}
	ops := &http.Server{Handler: a.opsHandler(), ReadHeaderTimeout: 5 * time.Second}
	opsErr := make(chan error, 1)
	go func() { opsErr <- ops.Serve(a.opsLn) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ops.Shutdown(sctx)
	}()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if err := <-opsErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.opsFailed.Store(fmt.Errorf("ops http: %w", err))
			cancel()
		}
	}()
	minWait := time.Duration(0)
	for {
		began := time.Now()
		err := a.life(lctx)
		if ferr, ok := a.opsFailed.Load().(error); ok {
			err = ferr
		}
		a.isReady.Store(false)
		if ctx.Err() == nil && errors.Is(err, errNotWritable) {
			a.teardown()
			if err := a.waitWritable(lctx, err); err != nil {
				a.log.Info("leafline stopped")
				return nil
			}
			continue
		}
		switch {
		case err == nil || (ctx.Err() != nil && errors.Is(err, context.Canceled)):
			a.log.Info("leafline stopped")
			return nil
		case errors.Is(err, ErrStorageLimits) || !isStorageFull(err) && !lowOnSpace(a.cfg.DataDir):
			a.log.Error("stopping on fatal error", "err", err)
			return err
		}
		a.reportStorageFull(err, minWait)
		a.teardown()
		// A start that fails again at once backs off, up to 30s; a box
		// that ran a while before its disk filled does not.
		if time.Since(began) > time.Minute {
			minWait = 0
		}
		if err := a.waitForSpace(lctx, minWait); err != nil {
			a.log.Info("leafline stopped")
			return nil
		}
		minWait = min(max(2*minWait, 2*time.Second), 30*time.Second)
	}
}

// life starts the box once and runs it until ctx is done or a loop fails.
func (a *App) life(ctx context.Context) error {
	if err := a.start(ctx); err != nil {
		return err
	}
	// Every name the start created (streams, consumers, the outbox, the
	// completion state) is durable before the box says it is ready.
	if err := dirsync.Tree(a.cfg.DataDir); err != nil {
		return fmt.Errorf("data dir %s: sync its directories: %w", a.cfg.DataDir, err)
	}
	g, gctx := errgroup.WithContext(ctx)
	a.startLoops(gctx, g)
	a.isReady.Store(true)
	a.notReady.Store("")
	a.metrics.storageFull.Set(0)
	a.metrics.storageWritable.Set(1)
	a.readyOnce.Do(func() { close(a.ready) })
	a.log.Info("leafline ready", "nats", a.ClientURL(), "ops", a.OpsAddr(), "domain", a.site.Domain)
	return g.Wait()
}

func (a *App) start(ctx context.Context) error {
	cfg := a.cfg
	if cfg.Cluster.Enabled() {
		return a.startOnCluster(ctx) // cluster.go
	}
	if !cfg.JetStream.Durable() {
		a.log.Warn("DURABILITY WARNING: jetstream.sync_interval is not \"always\": a PubAck only means the page cache, and a power cut can lose acknowledged events and receipts",
			"sync_interval", cfg.JetStream.SyncInterval)
	}
	if a.site.Role == topology.RoleEdge {
		if err := a.openOutbox(); err != nil { // see outbox_open.go
			return err
		}
	}
	opts, err := serverOptions(cfg, a.site)
	if err != nil {
		return err
	}
	// A no-space failure logged by the server before this start is not
	// this server's.
	select {
	case <-a.noSpace:
	default:
	}
	violation := a.metrics.violationHook(a.log)
	onError := func(msg string) { violation(msg); a.storeFailed(msg) }
	if a.srv, err = startServerWith(opts, a.log, onError); err != nil {
		return err
	}
	a.opsSrv.Store(a.srv)
	a.nc, err = nats.Connect("", nats.InProcessServer(a.srv), nats.Name("leafline-"+a.site.Name),
		nats.MaxReconnects(-1), a.natsErrors())
	if err != nil {
		return fmt.Errorf("connect to embedded server: %w", err)
	}
	if a.js, err = jetstream.New(a.nc); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p := jsplan.SitePlan(cfg, a.site)
	if a.held, err = holdSwitchedSources(rctx, a.js, cfg, a.site, &p); err != nil {
		return err
	}
	if err := jsplan.Reconcile(rctx, a.js, p); err != nil {
		return a.storageLimitsError(ctx, err)
	}
	switch a.site.Role {
	case topology.RoleEdge:
		return a.startEdge(rctx)
	case topology.RoleL1:
		return a.storageLimitsError(ctx, a.startL1(rctx))
	}
	return nil
}

func (a *App) startLoops(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return a.monitor(ctx) })
	if a.run != nil {
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
	}
	if a.svc != nil {
		g.Go(func() error { return a.svc.Run(ctx) })
		g.Go(func() error { a.guardDirectConsumers(ctx); return nil })
		if a.cleaner != nil {
			g.Go(func() error { return a.cleaner.Run(ctx) })
		}
	}
	g.Go(func() error { a.trimStreams(ctx); return nil })
	if held := a.held; len(held) > 0 {
		g.Go(func() error { a.positionSources(ctx, held); return nil })
	}
	a.startFleetLoops(ctx, g) // see role_l1_fleet.go
	if err := a.startHopRelays(ctx, g); err != nil {
		g.Go(func() error { return err })
	}
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
func (a *App) releaseMapped(ctx context.Context) {
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

// monitor refreshes the gauges that describe links, backlogs and storage,
// and prunes old published outbox records. It returns errJetStreamDisabled
// when the embedded server turned JetStream off under the running box, and
// an error wrapping errDiskFull when a watched filesystem is (nearly) full
// or the server failed a store write for lack of space (storage.go).
func (a *App) monitor(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastPrune := time.Time{}
	probe, err := a.newProbe() // see writable.go, cluster.go
	if err != nil {
		return err
	}
	for {
		if ctx.Err() == nil && !a.crashed.Load() && a.srv != nil && a.srv.Running() && !a.srv.JetStreamEnabled() {
			a.metrics.jetstreamEnabled.Set(0)
			return errJetStreamDisabled
		}
		if err := probe.check(time.Now()); err != nil && ctx.Err() == nil && !a.crashed.Load() {
			return err
		}
		if err := a.checkSpace(); err != nil && ctx.Err() == nil && !a.crashed.Load() {
			return err
		}
		a.metrics.storageWritable.Set(1)
		a.metrics.jetstreamEnabled.Set(1)
		up := 0.0
		if a.UpstreamConnected() {
			up = 1
		}
		a.metrics.upstreamConnected.Set(up)
		if a.ob != nil {
			if st, err := a.ob.Stats(); err == nil {
				a.metrics.outboxPending.Set(float64(st.Pending))
			}
			if time.Since(lastPrune) > time.Hour {
				// One transaction of at most pruneBatch records a tick, a
				// tick after another until one finds fewer: the outbox
				// keeps its retention whatever the rate of receipts.
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
		}
		a.updateSourceGauges(ctx)
		select {
		case <-ctx.Done():
			return nil
		case msg := <-a.noSpace:
			if !a.crashed.Load() {
				return fmt.Errorf("%w: the embedded nats-server failed a store write in %s: %s", errDiskFull, a.cfg.DataDir, msg)
			}
		case <-tick.C:
		}
	}
}

// pruneBatch bounds the published receipts one outbox prune deletes.
const pruneBatch = 10000

func (a *App) updateSourceGauges(ctx context.Context) {
	for _, sc := range jsplan.SitePlan(a.cfg, a.site).Streams {
		if len(sc.Sources) == 0 {
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := a.js.Stream(ictx, sc.Name)
		cancel()
		if err != nil {
			continue
		}
		for _, src := range s.CachedInfo().Sources {
			a.metrics.sourceLag.WithLabelValues(sc.Name, src.Name).Set(float64(src.Lag))
			a.metrics.sourceActive.WithLabelValues(sc.Name, src.Name).Set(src.Active.Seconds())
		}
	}
}

// UpstreamConnected reports whether the box's upstream leafnode is up.
func (a *App) UpstreamConnected() bool { return a.srv != nil && upstreamConnected(a.srv) }

// close stops the box for good.
func (a *App) close() {
	a.closed.Do(func() {
		a.teardown()
		if a.opsLn != nil {
			a.opsLn.Close()
		}
	})
}

// teardown stops what start started, in order, and forgets it: the micro
// service, the NATS connection, the embedded server, the outbox.
func (a *App) teardown() {
	a.opsL1.Store(nil)
	a.opsState.Store(nil)
	a.opsSrv.Store(nil)
	if a.micro != nil {
		_ = a.micro.Stop()
		a.micro = nil
	}
	a.opsDirect.Store(nil)
	if a.run != nil {
		// A direct consumer's own connection: flush the ACKs it buffered.
		if c, ok := a.run.Consumer().(interface{ Close() }); ok {
			c.Close()
		}
	}
	// The runner has stopped writing: release the sink's worker or pool
	// before the connection a nats sink uses goes.
	if err := a.opened.Close(); err != nil {
		a.log.Warn("sink close", "err", err)
	}
	a.opened = sink.Opened{}
	if a.state != nil {
		if err := a.state.Close(); err != nil {
			a.log.Warn("completion state close", "err", err)
		}
	}
	if a.nc != nil {
		a.nc.Close()
	}
	if a.pubNC != nil {
		a.pubNC.Close()
	}
	if a.srv != nil {
		a.srv.Shutdown()
		a.srv.WaitForShutdown()
	}
	if a.ob != nil {
		if err := a.ob.Close(); err != nil {
			a.log.Warn("outbox close", "err", err)
		}
	}
	a.nc, a.js, a.pubNC, a.ob, a.svc, a.state, a.run, a.signer = nil, nil, nil, nil, nil, nil, nil, nil
}

// Crash stops the box as a power cut would, for fault-injection harnesses:
// it closes the box's NATS connections and server under its running loops,
// with no drain, so in-flight work is abandoned unacked; the box then
// reports nothing (no storage alarms) until Run returns. Restart it with a
// new App on the same data dir. Use Run's context to stop a box cleanly.
func (a *App) Crash() {
	a.crashed.Store(true)
	if a.nc != nil {
		a.nc.Close()
	}
	if a.pubNC != nil {
		a.pubNC.Close()
	}
	if a.srv != nil {
		a.srv.Shutdown()
	}
}

// completionFile is L1's completion state in the data dir (package
// completion): derived from the completion log, rebuilt from it if lost.
const completionFile = "completion.db"
