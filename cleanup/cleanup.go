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
	// Pressure: the origin stream was at least PressureAt full, and
	// Grace is the grace period the pass applied.
	Pressure bool          `json:"pressure,omitempty"`
	Grace    time.Duration `json:"grace_ns"`
}

// CleanupStats are the Cleaner's counters since it was made.
type CleanupStats struct {
	Passes, Deleted, BytesFreed, Mismatches uint64
	// Purged counts the deletes (in Deleted) done by purging the head of
	// the stream.
	Purged  uint64
	Skipped map[string]uint64
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

	passes, deleted, purged, bytesFreed, mismatches atomic.Uint64
	pressure                                        atomic.Bool // the last pass's
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
			maxAge: cfg.AuditMaxAge, maxBytes: cfg.AuditMaxBytes, replicas: cfg.Replicas},
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
	return CleanupStats{Passes: c.passes.Load(), Deleted: c.deleted.Load(), Purged: c.purged.Load(), BytesFreed: c.bytesFreed.Load(),
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
	for {
		rep, err := c.Pass(ctx, false, time.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			c.log.Warn("receipts: cleanup pass failed", "err", err, "deleted", rep.Deleted)
		case rep.Deleted > 0 && !rep.Pressure:
			c.log.Info("receipts: cleanup pass", "examined", rep.Examined, "deleted", rep.Deleted, "bytes", rep.Bytes)
		default:
			c.log.Debug("receipts: cleanup pass", "examined", rep.Examined, "deleted", rep.Deleted, "skipped", rep.Skipped, "pressure", rep.Pressure)
		}
		if !c.pause(ctx, rep, err) {
			return nil
		}
	}
}

// pause waits after a pass: not at all while under pressure passes
// delete, a second while under pressure they do not, and otherwise
// Interval, or until the origin stream comes under pressure (read once a
// second). It returns false once ctx is done.
func (c *Cleaner) pause(ctx context.Context, rep CleanupReport, err error) bool {
	switch {
	case rep.Pressure && err == nil && rep.Deleted > 0:
		return ctx.Err() == nil
	case rep.Pressure:
		return ctxsleep.For(ctx, min(c.cfg.Interval, time.Second))
	}
	end := time.Now().Add(c.cfg.Interval)
	for {
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		if !ctxsleep.For(ctx, min(left, time.Second)) {
			return false
		}
		if c.underPressure(ctx) {
			return true
		}
	}
}

// underPressure reads whether the origin stream is at least PressureAt
// full now; false when it cannot tell.
func (c *Cleaner) underPressure(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.cfg.JS.Stream(ctx, c.cfg.OriginStream)
	return err == nil && FillOf(st.CachedInfo()) >= c.cfg.PressureAt
}

// Pressure reports whether the last pass found the origin stream at
// least PressureAt full.
func (c *Cleaner) Pressure() bool { return c.pressure.Load() }

// Pass examines up to MaxPerPass origin messages from where the last pass
// stopped (from the first message once it reached the young end) and, unless
// dryRun, deletes each eligible one after writing its audit record: the
// records of a pass first, in batches, then the deletes. The eligible
// messages from the stream's first one up to the first it keeps go in one
// purge; every other eligible message is deleted on its own.
func (c *Cleaner) Pass(ctx context.Context, dryRun bool, now time.Time) (CleanupReport, error) {
	rep := CleanupReport{DryRun: dryRun, Subjects: map[string]int{}, Sites: map[string]int{}, Skipped: map[string]int{}}
	st, err := c.cfg.JS.Stream(ctx, c.cfg.OriginStream)
	if err != nil {
		return rep, fmt.Errorf("receipts: cleanup: origin stream %s: %w", c.cfg.OriginStream, err)
	}
	sc, err := c.scan(ctx, st, now, dryRun)
	if err != nil {
		return rep, err
	}
	if was := c.pressure.Swap(sc.pressure); was != sc.pressure && !dryRun {
		if sc.pressure {
			c.log.Warn("receipts: cleanup: the origin stream is filling; done events now leave it after the pressure grace",
				"stream", c.cfg.OriginStream, "fill", fmt.Sprintf("%.0f%%", sc.fill*100), "grace", sc.grace)
		} else {
			c.log.Info("receipts: cleanup: the origin stream has room again; done events leave it after the grace",
				"stream", c.cfg.OriginStream, "fill", fmt.Sprintf("%.0f%%", sc.fill*100), "grace", sc.grace)
		}
	}
	rep.Examined, rep.Pressure, rep.Grace = len(sc.msgs), sc.pressure, sc.grace
	ds := make([]decision, len(sc.msgs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.Workers)
	for i := range sc.msgs {
		g.Go(func() (err error) {
			ds[i], err = c.decide(gctx, &sc.msgs[i], now, sc.grace)
			return err
		})
	}
	err = g.Wait()
	if err == nil && !dryRun {
		err = c.remove(ctx, st, sc, ds)
	}
	for i := range sc.msgs {
		rep.add(&sc.msgs[i], ds[i])
		c.count(ds[i].skip, dryRun)
	}
	if !dryRun {
		c.passes.Add(1)
		if err == nil {
			c.mu.Lock()
			c.cursor = sc.next
			c.mu.Unlock()
		}
	}
	return rep, err
}

// remove writes the audit records of the eligible messages of sc, then
// deletes them: the eligible run at the head of the stream in one purge,
// the others one by one. What it could not delete, it marks in ds.
func (c *Cleaner) remove(ctx context.Context, st jetstream.Stream, sc scan, ds []decision) error {
	var recs []*AuditRecord
	var at []int
	for i := range sc.msgs {
		if ds[i].skip == "" {
			recs = append(recs, c.record(&sc.msgs[i], ds[i].comp, sc.now))
			at = append(at, i)
		}
	}
	if len(recs) == 0 {
		return nil
	}
	var errs []error
	for j, err := range c.audit.writeAll(ctx, recs) {
		if err != nil {
			ds[at[j]].skip = SkipError
			errs = append(errs, err)
		}
	}
	failpoint.Inject(failpoint.L1AfterAuditWrite)
	head := 0
	if sc.fromFirst {
		for head < len(ds) && ds[head].skip == "" {
			head++
		}
	}
	rest := ds[head:]
	if head > 0 {
		if err := c.purgeHead(ctx, st, sc, ds[:head]); err != nil {
			errs = append(errs, err)
		}
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.Workers)
	for i := range rest {
		if rest[i].skip != "" {
			continue
		}
		m := &sc.msgs[head+i]
		g.Go(func() error {
			skip, err := c.deleteOne(gctx, st, m)
			if skip != "" {
				rest[i].skip = skip
			} else {
				rest[i].deleted = true
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// purgeHead deletes the eligible messages ds (sc.msgs[:len(ds)]), which
// are every message from the stream's first one, in one purge below the
// last of them. The purge names a sequence, not the messages: it goes
// ahead only if the stream is still the one the scan read (its creation
// time) and the message at that sequence still carries the event_id read.
// Nothing else can be below it: sequences are never reused.
func (c *Cleaner) purgeHead(ctx context.Context, st jetstream.Stream, sc scan, ds []decision) error {
	last := &sc.msgs[len(ds)-1]
	fail := func(skip string, err error) error {
		for i := range ds {
			ds[i].skip = skip
		}
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fail(SkipError, fmt.Errorf("receipts: cleanup: origin stream %s: %w", c.cfg.OriginStream, err))
	}
	if !info.Created.Equal(sc.created) {
		return fail(SkipMismatch, fmt.Errorf("receipts: cleanup: origin stream %s was created again during the pass; nothing purged", c.cfg.OriginStream))
	}
	raw, err := st.GetMsg(ctx, last.seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Deleted by another cleaner or by hand: those below it are
		// still eligible, the next pass takes them.
		return fail(SkipGone, nil)
	case err != nil:
		return fail(SkipError, err)
	}
	if id, err := c.eventID(jsmsg.Stored(raw)); err != nil || id != last.id {
		c.mismatched(last, "the message at the sequence changed after it was read")
		return fail(SkipMismatch, nil)
	}
	n, err := purgeBelow(ctx, c.cfg.JS, c.cfg.OriginStream, last.seq+1)
	if err != nil {
		return fail(SkipError, err)
	}
	// Messages another cleaner deleted between the scan and the purge
	// are not counted twice: the server says how many this purge took.
	for i := range ds {
		if uint64(i) < n {
			ds[i].deleted = true
			c.bytesFreed.Add(uint64(sc.msgs[i].bytes))
		} else {
			ds[i].skip = SkipGone
		}
	}
	c.deleted.Add(min(n, uint64(len(ds))))
	c.purged.Add(min(n, uint64(len(ds))))
	return nil
}

// deleteOne deletes one message whose audit record is written: it reads
// it again right before the delete, so that what is deleted is what the
// record names, or nothing. It returns the skip reason of a message it
// did not delete.
func (c *Cleaner) deleteOne(ctx context.Context, st jetstream.Stream, m *scanned) (string, error) {
	raw, err := st.GetMsg(ctx, m.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return SkipGone, nil
	}
	if err != nil {
		return SkipError, err
	}
	if id, err := c.eventID(jsmsg.Stored(raw)); err != nil || id != m.id {
		c.mismatched(m, "the message at the sequence changed after it was read")
		return SkipMismatch, nil
	}
	if err := st.DeleteMsg(ctx, m.seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
			return SkipGone, nil
		}
		return SkipError, err
	}
	c.deleted.Add(1)
	c.bytesFreed.Add(uint64(m.bytes))
	return "", nil
}

// decision is what a pass concluded for a message.
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

// decide applies the policy to m as of now, with the grace period in
// force.
func (c *Cleaner) decide(ctx context.Context, m *scanned, now time.Time, grace time.Duration) (decision, error) {
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
	if now.Sub(last) < grace {
		return decision{skip: SkipGrace}, nil
	}
	if c.cfg.Redriven != nil {
		if at, ok := c.cfg.Redriven(m.id); ok && now.Sub(at) < grace {
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
