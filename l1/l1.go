package l1

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/cleanup"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/eventid"
	"github.com/leafline/leafline/status"
	"github.com/leafline/leafline/status/console"
	"github.com/leafline/leafline/topology"
)

// Role is the l1 role of a box: the completion service and its state, the
// status API (HTTP and micro), the console, the cleanup and the guard of
// direct-mode edges' consumers. Make it with New and give it to box.New.
type Role struct {
	box.BaseRole
	b       *box.App
	cfg     *topology.Config
	site    *topology.Site
	log     *slog.Logger
	metrics *metrics
	opts    options

	nc      *nats.Conn
	js      jetstream.JetStream
	svc     *completion.Service
	state   *state.State // the completion state (the Service records in it)
	micro   micro.Service
	cleaner *cleanup.Cleaner // with completion.cleanup enabled
	// resend sends released edges their events again, and says which
	// edges L1 can send to alone (resend.go).
	resend *resender

	// What the ops handlers serve from, replaced at each start (a new
	// service after a restart on a full disk).
	opsL1    atomic.Pointer[l1Ops]
	opsFleet atomic.Pointer[console.Console] // console.go
	opsState atomic.Pointer[state.State]
}

// l1Ops is what L1's ops handlers serve from: the current completion
// service and its status API.
type l1Ops struct {
	svc    *completion.Service
	status http.Handler
}

// Option adjusts an l1 role made by New.
type Option func(*options)

type options struct {
	// consoleSample is the console's sampling interval (console.go).
	consoleSample time.Duration
}

// New returns the l1 role.
func New(opts ...Option) *Role {
	r := &Role{}
	for _, o := range opts {
		o(&r.opts)
	}
	return r
}

// Init keeps the box and registers the role's metrics.
func (a *Role) Init(b *box.App) error {
	a.b, a.cfg, a.site, a.log = b, b.Config(), b.Site(), b.Log()
	a.metrics = newMetrics(b.Metrics())
	a.resend = newResender(func() *completion.Service { return a.svc })
	return nil
}

// Completions is the completion service (while the box runs).
func (a *Role) Completions() *completion.Service { return a.svc }

// Loops runs the completion service, the guard of direct consumers, the
// cleanup and the console.
func (a *Role) Loops(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return a.svc.Run(ctx) })
	g.Go(func() error { a.guardDirectConsumers(ctx); return nil })
	g.Go(func() error { return a.resendReleased(ctx) })
	g.Go(func() error { return a.retireGone(ctx) })
	if a.cleaner != nil {
		g.Go(func() error { return a.cleaner.Run(ctx) })
	}
	a.startConsole(ctx, g) // console.go
}

// Routes serves the status API, /v1/events/{event_id}, /v1/events?status=…,
// /v1/summary, from the current completion service, and the console.
func (a *Role) Routes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		l1 := a.opsL1.Load()
		if l1 == nil {
			w.Header().Set("Retry-After", status.RetryAfter)
			box.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the completion service is not running: " + a.b.NotReadyReason()})
			return
		}
		l1.status.ServeHTTP(w, r)
	})
	mux.Handle("/console/", a.consoleHandler()) // console.go
}

// Readiness never answers ready from a partial state: not until the local
// completion state has folded its log.
func (a *Role) Readiness(r *box.Readiness) {
	st := a.opsState.Load()
	if !r.Ready || st == nil || st.Ready() {
		return
	}
	stats := st.Stats()
	r.Ready = false
	r.Reason = fmt.Sprintf("completion state catching up with its log (entry %d)", stats.Applied)
	if stats.Rebuilt != "" {
		r.Reason += "; rebuilding: " + stats.Rebuilt
	}
}

// Stop stops the micro service and closes the completion state.
func (a *Role) Stop() {
	a.opsL1.Store(nil)
	a.opsState.Store(nil)
	if a.micro != nil {
		_ = a.micro.Stop()
		a.micro = nil
	}
	if a.state != nil {
		if err := a.state.Close(); err != nil {
			a.log.Warn("completion state close", "err", err)
		}
	}
	a.nc, a.js, a.svc, a.state, a.cleaner = nil, nil, nil, nil, nil
}

// Start starts the completion service and what serves its state: the
// status API (HTTP and micro), the metrics and the cleanup.
func (a *Role) Start(ctx context.Context) error {
	// The box's config, which a reload may have changed since Init.
	a.cfg, a.site = a.b.Config(), a.b.Site()
	a.nc, a.js = a.b.Conn(), a.b.JetStream()
	t := a.cfg.Topology
	filters := map[string]string{}
	var sites []string
	for _, e := range t.Edges() {
		filters[e.Name] = e.Filter
		sites = append(sites, e.Name)
	}
	svc, err := completion.NewService(a.serviceConfig(sites, filters))
	if err != nil {
		return err
	}
	if err := a.b.Wait(ctx, "the completion service's streams", svc.Setup); err != nil {
		return fmt.Errorf("completion service: %w", err)
	}
	a.svc = svc
	a.opsL1.Store(&l1Ops{svc: svc, status: status.NewHTTPHandler(svc)})
	a.metrics.watchCompletions(svc.Stats)
	a.metrics.watchRefusals(svc.Refusals)
	a.metrics.watchHeld(svc.HeldBySite, sites)
	for _, site := range sites {
		a.metrics.resent.WithLabelValues(site)
		a.metrics.retiredEvents.WithLabelValues(site)
	}
	a.metrics.watchUnidentified(svc.UnidentifiedCount)
	if err := a.startCleanup(svc); err != nil {
		return err
	}
	// Any NATS client can ask "what happened to event X?" (nats micro ls).
	if a.micro, err = status.StartMicro(a.nc, svc, status.MicroConfig{}); err != nil {
		return fmt.Errorf("status micro service: %w", err)
	}
	return nil
}

// serviceConfig is the completion service of this l1 box; sites are the
// edges and filters their subject filters.
func (a *Role) serviceConfig(sites []string, filters map[string]string) completion.ServiceConfig {
	cfg, t := a.cfg, a.cfg.Topology
	return completion.ServiceConfig{
		JS:                a.js,
		OpenState:         func(ctx context.Context) (record.State, error) { return a.openState(ctx, sites) },
		Stream:            t.Receipts.L1Stream,
		Consumer:          cfg.Completion.Consumer,
		Bucket:            cfg.Completion.Bucket,
		Replicas:          a.b.Replicas(),
		History:           cfg.Completion.History,
		QuarantineStream:  cfg.Completion.QuarantineStream,
		QuarantineSubject: cfg.Completion.QuarantineSubject,
		Accept:            acceptReceipt(t),
		Verify:            verifyReceipt(t),
		// A receipt speaks only for the site that sent it: the hub binds
		// each link's receipts to its site's subjects, and an edge reports
		// only for itself (its processor is its site name).
		SubjectPrefix:   t.Receipts.SubjectPrefix,
		ProcessorIsSite: true,
		// Receipts of a priority class are applied in a lane of
		// their own, beside the others.
		Classes: t.ReceiptClasses(a.site),
		// The service also follows the origin stream, with its own
		// consumer, so that every published event has a pending record
		// and can be reported overdue. It ACKs nothing that matters on
		// L1A: a receipt is not an ACK of the origin message,
		// and deletes nothing there.
		OriginStream:  t.Events.OriginStream,
		OriginEventID: eventid.Extractor(cfg.EventID.JSONField, cfg.EventID.Header, cfg.EventID.MaxLength),
		Expected:      completion.ExpectedByFilter(filters),
		// What L1 sends again goes to the one edge missing it, where
		// that edge's hub takes it so, once the origin stream would not
		// drop the copy as a duplicate.
		Address: func(site, subject string) string {
			if !a.resend.addressable(site) {
				return ""
			}
			return topology.AddressedSubject(site, subject)
		},
		OriginDuplicates: t.Events.DuplicateWindow.D(),
		OverdueAfter:     cfg.Completion.OverdueAfter.D(),
		RedriveAfter:     cfg.Completion.RedriveAfter.D(),
		// A receipt for an event L1 has not seen is held: for hold_for at
		// most, and within the bounds of its site.
		HoldFor:             cfg.Completion.HoldFor.D(),
		HeldMaxPerSite:      cfg.Completion.HeldMaxPerSite,
		HeldMaxBytesPerSite: cfg.Completion.HeldMaxBytesPerSite,
		// The state commits whatever is waiting as one log entry and one
		// transaction: large batches make few, large commits.
		ApplyBatch: state.ServiceApplyBatch,
		BatchSize:  state.ServiceBatchSize,
		Sites:      sites,
		// The summary shows how full each of L1's streams is.
		Streams: summaryStreams(cfg, a.site),
		Logger:  a.log.With("component", "completion"),
	}
}

// summaryStreams names the streams whose fill L1's summary shows, each
// once: the site's planned streams (the origin and receipts streams), the
// completion log, the quarantine stream and the cleanup's audit stream.
// The service leaves out those that do not exist (no cleanup, no audit
// stream).
func summaryStreams(cfg *topology.Config, site *topology.Site) []string {
	var names []string
	for _, sc := range jsplan.SitePlan(cfg, site).Streams {
		names = append(names, sc.Name)
	}
	names = append(names, state.DefaultLogStream, cfg.Completion.QuarantineStream, cfg.Completion.Cleanup.AuditStream)
	var out []string
	for _, n := range names {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// openState opens the completion state: a local file folded from a log
// stream that every l1 box on this JetStream shares (package completion);
// the bucket of the previous layout is imported once.
func (a *Role) openState(ctx context.Context, sites []string) (record.State, error) {
	cfg := a.cfg
	st, err := state.Open(ctx, state.Config{
		JS:              a.js,
		Path:            filepath.Join(cfg.DataDir, completionFile),
		Replicas:        a.b.Replicas(),
		ImportBucket:    cfg.Completion.Bucket,
		OverdueAfter:    cfg.Completion.OverdueAfter.D(),
		Sites:           sites,
		HoldUntilOrigin: true,
		Logger:          a.log,
	})
	if err != nil {
		return nil, err
	}
	a.state = st
	a.opsState.Store(st)
	a.metrics.watchState(st)
	return st, nil
}

// completionFile is L1's completion state in the data dir (package
// completion): derived from the completion log, rebuilt from it if lost.
const completionFile = "completion.db"

// verifyReceipt checks each receipt against the public key its site has in
// the topology. A site with a receipt_key must sign: an unsigned, forged or
// altered receipt is quarantined, never applied. A site without one is
// accepted unverified. The receipts of one signed batch cost one signature
// verification between them (receipt.Verifier).
func verifyReceipt(t *topology.Topology) func(receipt.Receipt, []byte, nats.Header) (bool, error) {
	v := receipt.NewVerifier()
	return func(r receipt.Receipt, data []byte, h nats.Header) (bool, error) {
		s, ok := t.Site(r.Site)
		if !ok || s.ReceiptKey == "" {
			return false, nil
		}
		if err := v.VerifyMsg(s.ReceiptKey, data, h); err != nil {
			return false, fmt.Errorf("site %s: %w", r.Site, err)
		}
		return true, nil
	}
}

// acceptReceipt refuses receipts from sites the topology does not know as
// edges, or for origin streams other than the topology's.
func acceptReceipt(t *topology.Topology) func(receipt.Receipt) error {
	return func(r receipt.Receipt) error {
		s, ok := t.Site(r.Site)
		if !ok || s.Role != topology.RoleEdge {
			return fmt.Errorf("receipt from unknown edge site %q", r.Site)
		}
		if p, ok := t.Site(r.Processor); !ok || p.Role != topology.RoleEdge {
			return fmt.Errorf("receipt names unknown processor %q", r.Processor)
		}
		if r.OriginStream != t.Events.OriginStream {
			return fmt.Errorf("receipt names unknown origin stream %q", r.OriginStream)
		}
		return nil
	}
}

// Cleaner is the cleanup of the origin stream (while the box runs, with
// completion.cleanup enabled; nil otherwise).
func (a *Role) Cleaner() *cleanup.Cleaner { return a.cleaner }
