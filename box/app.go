package box

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
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/internal/dirsync"
	"github.com/leafline/leafline/internal/logx"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// App is one leafline box: an embedded nats-server, its links, and the
// role the site has (see Role). Create it with New, then call Run.
type App struct {
	cfg     *topology.Config
	site    *topology.Site
	log     *slog.Logger
	metrics *Metrics
	opts    options
	role    Role

	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream

	// held are the sources of links switched from the relay to sourcing
	// that wait to be positioned (switch.go).
	held []heldSource
	// plans are the site's trim plans (trim.go), releases a hub's record
	// of the edges it released past their budget, and backlogs what its
	// events stream held for each at the last trim (backlog.go).
	plans    []jsplan.TrimPlan
	tips     *jsplan.Tips // where the relays' links stand in the plans' streams
	releases *releases
	backlogs atomic.Pointer[map[string]jsplan.Backlog]

	// noSpace carries a store write that the embedded server logged as
	// failed for lack of space (storeFailed) to monitor.
	noSpace chan string

	// reloads carries Reload's requests to the running life; next is the
	// one a restart takes, and reloaded answers it once the box runs on
	// it (reload.go). auth is the running server's link authentication.
	reloads  chan reload
	next     *reload
	reloaded chan error
	auth     *linkAuth

	opsLn     net.Listener
	opsFailed atomic.Value                  // error: the ops server failed
	opsSrv    atomic.Pointer[server.Server] // the current server, for the ops handlers
	ready     chan struct{}
	readyOnce sync.Once
	isReady   atomic.Bool
	notReady  atomic.Value // string: why the box is not ready
	// streamFull names a full stream of the box's (updateStreamGauges),
	// "" when none is.
	streamFull atomic.Value
	// memoryShort says why the box is short of memory (checkMemory), ""
	// when it is not.
	memoryShort atomic.Value
	crashed     atomic.Bool // Crash was called
	closed      sync.Once
}

// New checks the configuration and prepares an App whose site has role.
// It starts nothing.
func New(cfg *topology.Config, log *slog.Logger, role Role, opts ...Option) (*App, error) {
	if cfg == nil || cfg.Topology == nil {
		return nil, errors.New("box: configuration has no topology")
	}
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return nil, fmt.Errorf("box: site %q is not in the topology", cfg.Site)
	}
	if role == nil {
		return nil, fmt.Errorf("box: site %q has no role to run", cfg.Site)
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
		metrics: NewMetrics(site.Name, string(site.Role)),
		role:    role,
		ready:   make(chan struct{}),
		noSpace: make(chan string, 1),
		reloads: make(chan reload),
	}
	for _, o := range opts {
		o(&a.opts)
	}
	if err := role.Init(a); err != nil {
		return nil, err
	}
	a.notReady.Store("starting")
	return a, nil
}

// Ready is closed once Run has started everything and the box serves.
func (a *App) Ready() <-chan struct{} { return a.ready }

// Metrics returns the box's metrics.
func (a *App) Metrics() *Metrics { return a.metrics }

// Role is the role the box runs.
func (a *App) Role() Role { return a.role }

// Config is the box's configuration.
func (a *App) Config() *topology.Config { return a.cfg }

// Site is the box's site in the topology.
func (a *App) Site() *topology.Site { return a.site }

// Log is the box's logger (with its site and role).
func (a *App) Log() *slog.Logger { return a.log }

// Conn is the box's connection to its embedded server (valid while the
// role runs).
func (a *App) Conn() *nats.Conn { return a.nc }

// JetStream is the box's JetStream context on Conn (valid while the role
// runs).
func (a *App) JetStream() jetstream.JetStream { return a.js }

// NotReadyReason is why the box is not ready, "" when it is.
func (a *App) NotReadyReason() string {
	msg, _ := a.notReady.Load().(string)
	return msg
}

// ClientURL is the embedded server's client URL (valid after Ready).
// In cluster mode it is the cluster's URLs.
func (a *App) ClientURL() string {
	if a.srv == nil {
		return a.cfg.Cluster.ClusterURL()
	}
	return a.srv.ClientURL()
}

// Server is the embedded server (valid after Ready; nil on a cluster).
func (a *App) Server() *server.Server { return a.srv }

// OpsAddr is the ops HTTP address (valid after Ready).
func (a *App) OpsAddr() string { return a.opsLn.Addr().String() }

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
		if ctx.Err() == nil && errors.Is(err, errRestart) {
			a.teardown()
			r := a.next
			a.cfg, a.site, a.next, a.reloaded = r.cfg, r.site, nil, r.done
			continue
		}
		if a.reloaded != nil {
			a.reloaded <- fmt.Errorf("box: reload: the box did not start on the new configuration: %w", err)
			a.reloaded = nil
		}
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
	for {
		lctx, cancel := context.WithCancel(ctx)
		g, gctx := errgroup.WithContext(lctx)
		a.startLoops(gctx, g)
		a.isReady.Store(true)
		a.notReady.Store("")
		a.metrics.storageFull.Set(0)
		a.metrics.storageWritable.Set(1)
		a.readyOnce.Do(func() { close(a.ready) })
		a.log.Info("leafline ready", "nats", a.ClientURL(), "ops", a.OpsAddr(), "domain", a.site.Domain)
		if a.reloaded != nil {
			a.reloaded <- nil
			a.reloaded = nil
		}
		ended := make(chan error, 1)
		go func() { ended <- g.Wait() }()
		select {
		case err := <-ended:
			cancel()
			return err
		case r := <-a.reloads:
			a.isReady.Store(false)
			a.notReady.Store("reloading its configuration")
			err := a.takeReload(ctx, r, cancel, ended)
			cancel()
			if err != nil {
				return err
			}
		}
	}
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
	// Before the server: what the role must hold first (the edge's
	// outbox, whose lock is the data dir's).
	if err := a.role.Open(); err != nil {
		return err
	}
	opts, err := ServerOptions(cfg, a.site)
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
	a.auth, _ = opts.CustomClientAuthentication.(*linkAuth)
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
	rctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	p := jsplan.SitePlan(cfg, a.site)
	if a.held, err = holdSwitchedSources(rctx, a.js, cfg, a.site, &p); err != nil {
		return err
	}
	if err := jsplan.Reconcile(rctx, a.js, p); err != nil {
		return a.storageLimitsError(ctx, err)
	}
	if err := a.prune(rctx); err != nil {
		return err
	}
	if a.plans, err = a.trimPlans(rctx); err != nil {
		return a.storageLimitsError(ctx, err)
	}
	return a.storageLimitsError(ctx, a.role.Start(rctx))
}

// setupTimeout bounds the setup of a start or a reload (the site's
// streams and consumers, the role's start).
const setupTimeout = 30 * time.Second

func (a *App) startLoops(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return a.monitor(ctx) })
	a.role.Loops(ctx, g)
	g.Go(func() error { a.trimStreams(ctx); return nil })
	if held := a.held; len(held) > 0 {
		g.Go(func() error { a.positionSources(ctx, held); return nil })
	}
	a.metrics.watchLinks(a.opsSrv.Load)
	if err := a.startHopRelays(ctx, g); err != nil {
		g.Go(func() error { return err })
	}
}

// monitor refreshes the gauges that describe links, backlogs and storage.
// It returns errJetStreamDisabled when the embedded server turned
// JetStream off under the running box, and an error wrapping errDiskFull when a watched filesystem is (nearly) full
// or the server failed a store write for lack of space (storage.go).
func (a *App) monitor(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
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
		a.metrics.UpstreamConnected.Set(up)
		a.updateStreamGauges(ctx)
		a.checkMemory()
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

// updateStreamGauges exports what each stream of the box holds against
// its limits (its streams of the topology and leafline's own: the
// completion log, the audit, quarantine and dead-letter streams), and
// its sources' lag, and keeps the first stream that is full and refuses
// what comes for /readyz.
func (a *App) updateStreamGauges(ctx context.Context) {
	full := ""
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	streams := a.js.ListStreams(ictx)
	for info := range streams.Info() {
		name := info.Config.Name
		a.metrics.streamBytes.WithLabelValues(name).Set(float64(info.State.Bytes))
		a.metrics.streamMsgs.WithLabelValues(name).Set(float64(info.State.Msgs))
		a.metrics.streamMaxBytes.WithLabelValues(name).Set(float64(info.Config.MaxBytes))
		a.metrics.streamMaxMsgs.WithLabelValues(name).Set(float64(info.Config.MaxMsgs))
		discardNew := 0.0
		if info.Config.Discard == jetstream.DiscardNew {
			discardNew = 1
		}
		a.metrics.streamDiscardNew.WithLabelValues(name).Set(discardNew)
		// A stream that drops its oldest messages at its limits takes
		// what comes; only one that discards new ones refuses it.
		if full == "" && info.Config.Discard == jetstream.DiscardNew && streamFull(info.State.Bytes, info.Config.MaxBytes) {
			full = fmt.Sprintf("stream %s is full (%s of its %s limit, jetstream.max_stream_bytes): it refuses what is published or relayed into it",
				name, byteSize(int64(info.State.Bytes)), byteSize(info.Config.MaxBytes))
		}
		for _, src := range info.Sources {
			a.metrics.sourceLag.WithLabelValues(name, src.Name).Set(float64(src.Lag))
			a.metrics.sourceActive.WithLabelValues(name, src.Name).Set(src.Active.Seconds())
		}
	}
	if streams.Err() != nil {
		return // keep what was known
	}
	a.streamFull.Store(full)
}

// streamFull reports whether a stream holding bytes of its limit max
// (<= 0: none) takes no more than a few messages: within 1% (at most
// 1 MiB) of it.
func streamFull(bytes uint64, max int64) bool {
	return max > 0 && int64(bytes) >= max-min(max/100, 1<<20)
}

// UpstreamConnected reports whether the box's upstream leafnode is up.
func (a *App) UpstreamConnected() bool { return a.srv != nil && UpstreamConnected(a.srv) }

// close stops the box for good.
func (a *App) close() {
	a.closed.Do(func() {
		a.teardown()
		if a.opsLn != nil {
			a.opsLn.Close()
		}
	})
}

// teardown stops what start started, in order, and forgets it: the role's
// parts, the NATS connection, the embedded server, then what the role
// holds past the server (the edge's outbox).
func (a *App) teardown() {
	a.opsSrv.Store(nil)
	a.role.Stop()
	if a.nc != nil {
		a.nc.Close()
	}
	if a.srv != nil {
		a.srv.Shutdown()
		a.srv.WaitForShutdown()
	}
	a.role.Closed()
	a.nc, a.js, a.releases = nil, nil, nil
}

// Crash stops the box as a power cut would, for fault-injection harnesses:
// it closes the box's NATS connections and server under its running loops,
// with no drain, so in-flight work is abandoned unacked; the box then
// reports nothing (no storage alarms) until Run returns. Restart it with a
// new App on the same data dir. Use Run's context to stop a box cleanly.
func (a *App) Crash() {
	a.crashed.Store(true)
	a.role.Crash()
	if a.nc != nil {
		a.nc.Close()
	}
	if a.srv != nil {
		a.srv.Shutdown()
	}
}
