package edge

// The l1 role: the completion service, its state, status API and cleanup.

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/edge/eventid"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"
	"github.com/leafline/leafline/topology"
)

// startL1 starts the completion service and what serves its state: the
// status API (HTTP and micro), the metrics and the cleanup.
func (a *App) startL1(ctx context.Context) error {
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
	if err := svc.Setup(ctx); err != nil {
		return fmt.Errorf("completion service: %w", err)
	}
	a.svc = svc
	a.opsL1.Store(&l1Ops{svc: svc, status: status.NewHTTPHandler(svc)})
	a.metrics.watchCompletions(svc.Stats)
	a.metrics.watchRefusals(svc.Refusals)
	a.metrics.watchHeld(svc.HeldBySite, sites)
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
func (a *App) serviceConfig(sites []string, filters map[string]string) completion.ServiceConfig {
	cfg, t := a.cfg, a.cfg.Topology
	return completion.ServiceConfig{
		JS:                a.js,
		OpenState:         func(ctx context.Context) (record.State, error) { return a.openState(ctx, sites) },
		Stream:            t.Receipts.L1Stream,
		Consumer:          cfg.Completion.Consumer,
		Bucket:            cfg.Completion.Bucket,
		Replicas:          a.replicas(),
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
		// The service also follows the origin stream, with its own
		// consumer, so that every published event has a pending record
		// and can be reported overdue. It ACKs nothing that matters on
		// L1A: a receipt is not an ACK of the origin message,
		// and deletes nothing there.
		OriginStream:  t.Events.OriginStream,
		OriginEventID: eventid.Extractor(cfg.EventID),
		Expected:      completion.ExpectedByFilter(filters),
		OverdueAfter:  cfg.Completion.OverdueAfter.D(),
		RedriveAfter:  cfg.Completion.RedriveAfter.D(),
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
		Logger:     a.log.With("component", "completion"),
	}
}

// openState opens the completion state: a local file folded from a log
// stream that every l1 box on this JetStream shares (package completion);
// the bucket of the previous layout is imported once.
func (a *App) openState(ctx context.Context, sites []string) (record.State, error) {
	cfg := a.cfg
	st, err := state.Open(ctx, state.Config{
		JS:              a.js,
		Path:            filepath.Join(cfg.DataDir, completionFile),
		Replicas:        a.replicas(),
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
