package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/failpoint"
	"github.com/leafline/leafline/internal/jsmsg"
	"github.com/leafline/leafline/receipt"
)

// Skip reasons of a cleanup pass (CleanupReport.Skipped, CleanupStats).
const (
	SkipUntracked      = "untracked"       // no record, or the tracker has not seen the origin yet
	SkipUnidentified   = "unidentified"    // the message has no usable event_id
	SkipPending        = "pending"         // a processor has not reported a terminal status
	SkipDeadLettered   = "dead_lettered"   // dead-lettered and the policy keeps those
	SkipExpired        = "expired"         // expired at an edge and the policy keeps those
	SkipConflict       = "conflict"        // conflicting receipts or a reused event_id: an operator decides
	SkipGrace          = "grace"           // the last terminal receipt (or the message) is younger than Grace
	SkipRedrivePending = "redrive_pending" // redriven less than Grace ago
	SkipMismatch       = "mismatch"        // the message at the sequence is not the recorded event
	SkipGone           = "gone"            // already deleted (another cleaner, or the stream's limits)
	SkipError          = "error"           // a read, audit write or delete failed; the next pass tries again
)

// CleanupSkipReasons lists every skip reason, for metrics.
var CleanupSkipReasons = []string{SkipUntracked, SkipUnidentified, SkipPending, SkipDeadLettered, SkipExpired, SkipConflict,
	SkipGrace, SkipRedrivePending, SkipMismatch, SkipGone, SkipError}

// CleanupReport is what one pass found (dry run) or did.
type CleanupReport struct {
	DryRun   bool           `json:"dry_run"`
	Examined int            `json:"examined"`
	Eligible int            `json:"eligible"` // would be (dry run) or were decided for deletion
	Deleted  int            `json:"deleted"`
	Bytes    int64          `json:"bytes"` // payload and header bytes of the eligible messages
	Oldest   time.Time      `json:"oldest,omitzero"`
	Subjects map[string]int `json:"by_subject,omitempty"`
	Sites    map[string]int `json:"by_site,omitempty"`
	Skipped  map[string]int `json:"skipped,omitempty"`
}

// CleanupStats are the Cleaner's counters since it was made.
type CleanupStats struct {
	Passes, Deleted, BytesFreed, Mismatches uint64
	Skipped                                 map[string]uint64
}

// Cleaner deletes origin messages whose events are done, each only after
// its audit record is durable. See the package documentation, "Cleanup".
type Cleaner struct {
	cfg   CleanupConfig
	log   *slog.Logger
	audit *auditLog

	mu       sync.Mutex
	cursor   uint64            // next sequence to examine
	skipped  map[string]uint64 // cumulative, per reason
	mismatch map[uint64]bool   // sequences already logged as mismatches

	passes, deleted, bytesFreed, mismatches atomic.Uint64
}

// NewCleaner fills defaults into cfg, validates it and returns a Cleaner.
// It does no I/O; call Setup (or Run).
func NewCleaner(cfg CleanupConfig) (*Cleaner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Cleaner{
		cfg: cfg, log: cfg.Logger,
		audit: &auditLog{js: cfg.JS, stream: cfg.AuditStream, prefix: cfg.AuditSubject,
			maxAge: cfg.AuditMaxAge, replicas: cfg.Replicas},
		skipped: map[string]uint64{}, mismatch: map[uint64]bool{},
	}, nil
}

// Setup checks the origin stream's retention and creates the audit stream
// if absent.
func (c *Cleaner) Setup(ctx context.Context) error {
	st, err := c.cfg.JS.Stream(ctx, c.cfg.OriginStream)
	if err != nil {
		return fmt.Errorf("receipts: cleanup: origin stream %s: %w", c.cfg.OriginStream, err)
	}
	if r := st.CachedInfo().Config.Retention; r != jetstream.LimitsPolicy {
		return fmt.Errorf("receipts: cleanup: origin stream %s has %s retention; the cleaner deletes only from a LimitsPolicy stream: %w", c.cfg.OriginStream, r, record.ErrIncompatible)
	}
	return c.audit.ensure(ctx)
}

// Stats returns the counters.
func (c *Cleaner) Stats() CleanupStats {
	c.mu.Lock()
	sk := make(map[string]uint64, len(c.skipped))
	for k, v := range c.skipped {
		sk[k] = v
	}
	c.mu.Unlock()
	return CleanupStats{Passes: c.passes.Load(), Deleted: c.deleted.Load(), BytesFreed: c.bytesFreed.Load(),
		Mismatches: c.mismatches.Load(), Skipped: sk}
}

// Audit returns every audit record of eventID (none: nil, nil).
func (c *Cleaner) Audit(ctx context.Context, eventID string) ([]AuditEntry, error) {
	if err := receipt.ValidateEventID(eventID); err != nil {
		return nil, err
	}
	return c.audit.list(ctx, eventID)
}

// Cleaned returns the reference to the audit record of the origin message
// the tracker recorded for comp; nil if it was not cleaned.
func (c *Cleaner) Cleaned(ctx context.Context, comp *record.Completion) (*record.AuditRef, error) {
	if !comp.OriginKnown() || comp.OriginSeq == 0 {
		return nil, nil
	}
	_, ref, err := c.audit.lookup(ctx, comp.EventID, comp.OriginSeq)
	return ref, err
}

// Run sets up, then runs a pass every Interval until ctx is done; a failed
// pass is logged and the next one tried. It returns nil on a clean stop.
func (c *Cleaner) Run(ctx context.Context) error {
	for {
		err := c.Setup(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, record.ErrIncompatible) {
			return err
		}
		c.log.Warn("receipts: cleanup: setup failed; retrying", "err", err)
		if !ctxsleep.For(ctx, c.cfg.Interval) {
			return nil
		}
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		rep, err := c.Pass(ctx, false, time.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			c.log.Warn("receipts: cleanup pass failed", "err", err, "deleted", rep.Deleted)
		case rep.Deleted > 0:
			c.log.Info("receipts: cleanup pass", "examined", rep.Examined, "deleted", rep.Deleted, "bytes", rep.Bytes)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass examines up to MaxPerPass origin messages from where the last pass
// stopped (from the first message once it reached the young end) and, unless
// dryRun, deletes each eligible one after writing its audit record.
func (c *Cleaner) Pass(ctx context.Context, dryRun bool, now time.Time) (CleanupReport, error) {
	rep := CleanupReport{DryRun: dryRun, Subjects: map[string]int{}, Sites: map[string]int{}, Skipped: map[string]int{}}
	st, err := c.cfg.JS.Stream(ctx, c.cfg.OriginStream)
	if err != nil {
		return rep, fmt.Errorf("receipts: cleanup: origin stream %s: %w", c.cfg.OriginStream, err)
	}
	msgs, next, err := c.scan(ctx, st, now, dryRun)
	if err != nil {
		return rep, err
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.Workers)
	for i := range msgs {
		m := &msgs[i]
		g.Go(func() error {
			d, err := c.one(gctx, st, m, dryRun, now)
			mu.Lock()
			defer mu.Unlock()
			rep.add(m, d)
			return err
		})
	}
	err = g.Wait()
	rep.Examined = len(msgs)
	if !dryRun {
		c.passes.Add(1)
		if err == nil {
			c.mu.Lock()
			c.cursor = next
			c.mu.Unlock()
		}
	}
	return rep, err
}

// scanned is one origin message as the scan read it.
type scanned struct {
	seq      uint64
	subject  string
	id       string
	idErr    error
	stored   time.Time
	bytes    int64
	redriven bool // carries RedriveHeader
}

// decision is what one() concluded for a message.
type decision struct {
	skip    string // "" = eligible
	deleted bool
	comp    *record.Completion
}

func (r *CleanupReport) add(m *scanned, d decision) {
	if d.skip != "" {
		r.Skipped[d.skip]++
		return
	}
	r.Eligible++
	r.Bytes += m.bytes
	r.Subjects[m.subject]++
	for _, p := range d.comp.Expected {
		r.Sites[p]++
	}
	if r.Oldest.IsZero() || m.stored.Before(r.Oldest) {
		r.Oldest = m.stored
	}
	if d.deleted {
		r.Deleted++
	}
}

// one handles one message and counts why it was kept, if it was.
func (c *Cleaner) one(ctx context.Context, st jetstream.Stream, m *scanned, dryRun bool, now time.Time) (decision, error) {
	d, err := c.clean(ctx, st, m, dryRun, now)
	c.count(d.skip, dryRun)
	return d, err
}

// clean decides one message and, unless dryRun, deletes it: audit record
// first (PubAck'ed, or found from an earlier pass), then the delete.
func (c *Cleaner) clean(ctx context.Context, st jetstream.Stream, m *scanned, dryRun bool, now time.Time) (decision, error) {
	d, err := c.decide(ctx, m, now)
	if err != nil || d.skip != "" || dryRun {
		return d, err
	}
	if err := c.audit.write(ctx, c.record(m, d.comp, now)); err != nil {
		return decision{skip: SkipError}, err
	}
	failpoint.Inject(failpoint.L1AfterAuditWrite)
	// Read the message again right before the delete: what is deleted is
	// what the record names, or nothing.
	raw, err := st.GetMsg(ctx, m.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return decision{skip: SkipGone}, nil
	}
	if err != nil {
		return decision{skip: SkipError}, err
	}
	if id, err := c.eventID(jsmsg.Stored(raw)); err != nil || id != m.id {
		c.mismatched(m, "the message at the sequence changed after it was read")
		return decision{skip: SkipMismatch}, nil
	}
	if err := st.DeleteMsg(ctx, m.seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
			return decision{skip: SkipGone}, nil
		}
		return decision{skip: SkipError}, err
	}
	c.deleted.Add(1)
	c.bytesFreed.Add(uint64(m.bytes))
	d.deleted = true
	return d, nil
}

// decide applies the policy to m as of now.
func (c *Cleaner) decide(ctx context.Context, m *scanned, now time.Time) (decision, error) {
	if m.idErr != nil {
		return decision{skip: SkipUnidentified}, nil
	}
	comp, err := c.cfg.Store.Get(ctx, m.id)
	if errors.Is(err, record.ErrNotFound) {
		return decision{skip: SkipUntracked}, nil
	}
	if err != nil {
		return decision{skip: SkipError}, err
	}
	if !comp.OriginKnown() || comp.OriginSeq == 0 {
		return decision{skip: SkipUntracked}, nil
	}
	copyOf := m.seq != comp.OriginSeq && m.redriven && m.seq > comp.OriginSeq
	if m.seq != comp.OriginSeq && !copyOf {
		c.mismatched(m, "the recorded event has another origin sequence")
		return decision{skip: SkipMismatch}, nil
	}
	switch {
	case len(comp.MissingProcessors()) > 0:
		return decision{skip: SkipPending}, nil
	case comp.Conflict:
		return decision{skip: SkipConflict}, nil
	case comp.Status == record.EventDeadLettered && !c.cfg.AllowDeadLettered:
		return decision{skip: SkipDeadLettered}, nil
	case anyExpired(&comp) && !c.cfg.AllowExpired:
		return decision{skip: SkipExpired}, nil
	case comp.Status != record.EventComplete && comp.Status != record.EventDeadLettered && comp.Status != record.EventExpired &&
		comp.Status != record.EventRetired:
		// A retired site's events are done for it (record.StatusRetired).
		return decision{skip: SkipPending}, nil
	}
	last := later(comp.PublishedAt, m.stored)
	for _, p := range comp.Expected {
		last = later(last, comp.Processors[p].ReceivedAt)
	}
	if now.Sub(last) < c.cfg.Grace {
		return decision{skip: SkipGrace}, nil
	}
	if c.cfg.Redriven != nil {
		if at, ok := c.cfg.Redriven(m.id); ok && now.Sub(at) < c.cfg.Grace {
			return decision{skip: SkipRedrivePending}, nil
		}
	}
	return decision{comp: &comp}, nil
}

// record builds the audit record of m.
func (c *Cleaner) record(m *scanned, comp *record.Completion, now time.Time) *AuditRecord {
	r := &AuditRecord{V: auditVersion, EventID: m.id, Stream: c.cfg.OriginStream, Subject: m.subject, Seq: m.seq,
		RedriveCopy: m.seq != comp.OriginSeq, PublishedAt: m.stored, Bytes: m.bytes,
		Policy: c.cfg.policy(), DeletedBy: c.cfg.DeletedBy, DecidedAt: now.UTC()}
	for _, p := range comp.Expected {
		pr := comp.Processors[p]
		r.Receipts = append(r.Receipts, AuditReceipt{Processor: p, Site: pr.Site, Status: pr.Status,
			ReceiptID: pr.ReceiptID, Verified: pr.Verified, ReceivedAt: pr.ReceivedAt})
	}
	return r
}

func (c *Cleaner) count(reason string, dryRun bool) {
	if reason == "" || dryRun {
		return
	}
	c.mu.Lock()
	c.skipped[reason]++
	c.mu.Unlock()
}

// mismatched logs and counts a message that is not the recorded event at
// its sequence, once per sequence; it is never deleted.
func (c *Cleaner) mismatched(m *scanned, why string) {
	c.mu.Lock()
	first := !c.mismatch[m.seq]
	if first && len(c.mismatch) < 100_000 {
		c.mismatch[m.seq] = true
	}
	c.mu.Unlock()
	if first {
		c.mismatches.Add(1)
		c.log.Warn("receipts: cleanup refused: "+why+"; the message is kept",
			"stream", c.cfg.OriginStream, "seq", m.seq, "subject", m.subject, "event_id", receipt.ShortQuote(m.id))
	}
}

// eventID reads the event_id of an origin message as the tracker does.
func (c *Cleaner) eventID(msg jetstream.Msg) (id string, err error) {
	if c.cfg.OriginEventID == nil {
		if id = msg.Headers().Get(c.cfg.OriginHeader); id == "" {
			return "", fmt.Errorf("header %s missing", c.cfg.OriginHeader)
		}
		return id, receipt.ValidateEventID(id)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("OriginEventID panicked: %v", p)
		}
	}()
	if id, err = c.cfg.OriginEventID(msg); err != nil {
		return "", err
	}
	return id, receipt.ValidateEventID(id)
}

// msgBytes is a message's payload and header size.
func msgBytes(m jetstream.Msg) int64 {
	n := int64(len(m.Data()))
	if s := m.Headers().Get(msgSizeHeader); s != "" {
		n, _ = strconv.ParseInt(s, 10, 64)
	}
	for k, vs := range m.Headers() {
		if k == msgSizeHeader {
			continue
		}
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}

// msgSizeHeader carries the payload size of a headers-only delivery.
const msgSizeHeader = "Nats-Msg-Size"

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// anyExpired reports whether a processor of c reported expired.
func anyExpired(c *record.Completion) bool {
	for _, p := range c.Processors {
		if p.Status == receipt.StatusExpired {
			return true
		}
	}
	return false
}
