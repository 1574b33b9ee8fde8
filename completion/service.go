package completion

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/failpoint"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology/subjects"
)

// Service is the L1 completion service: it consumes a receipts stream and
// records each receipt in a Store. Several Services (in one process or many)
// may share one consumer and one bucket. See the package documentation for
// the per-message rules.
type Service struct {
	cfg               ServiceConfig
	log               *slog.Logger
	quarantineSubject string
	state             atomic.Pointer[stateRef]
	openMu            sync.Mutex // serializes opening the state
	running           atomic.Bool

	received, applied, duplicates, conflicts, quarantined, retried atomic.Uint64

	originReceived, originTracked, originKnown, originSkipped, originRetried atomic.Uint64
	originReused                                                             atomic.Uint64

	redrive  redriver
	redriven atomic.Uint64
	resent   atomic.Uint64 // Resend

	cleaner atomic.Pointer[audits] // shows Completion.Cleaned in Get (AttachCleaner)

	unidentified unidentifiedKV // origin messages without a usable event_id
	lastReceipt  siteClock      // per processor, when this instance last recorded a receipt

	held, heldReleased, heldRefused, heldExpired atomic.Uint64
	heldLimited                                  atomic.Uint64
	refused                                      refusals

	heldTally   heldTally  // receipts held per site (held_limit.go)
	heldLimitMu sync.Mutex // one limitHeld at a time

	fills streamFills // what Summary last read of ServiceConfig.Streams (svc_streams.go)
}

// NewService fills defaults into cfg, validates it, and returns a Service.
// It does no I/O; call Setup or Run.
func NewService(cfg ServiceConfig) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{
		cfg:               cfg,
		log:               cfg.Logger.With("component", "receipts", "stream", cfg.Stream, "consumer", cfg.Consumer),
		quarantineSubject: cfg.QuarantineSubject + ".receipts",
	}, nil
}

// State returns the completion state, or nil until Setup (or Run) has
// opened it (and for a nil Service, so that status queries on it answer
// ErrNotReady).
func (s *Service) State() record.State {
	if s == nil {
		return nil
	}
	if ref := s.state.Load(); ref != nil {
		return ref.State
	}
	return nil
}

// Store returns the KV completion store when that is the Service's State
// (ServiceConfig.OpenState unset), or nil.
func (s *Service) Store() *kvstore.Store {
	st, _ := s.State().(*kvstore.Store)
	return st
}

// Stats returns a snapshot of the counters.
func (s *Service) Stats() record.Stats {
	return record.Stats{
		Received:    s.received.Load(),
		Applied:     s.applied.Load(),
		Duplicates:  s.duplicates.Load(),
		Conflicts:   s.conflicts.Load(),
		Quarantined: s.quarantined.Load(),
		Retried:     s.retried.Load(),

		OriginReceived: s.originReceived.Load(),
		OriginTracked:  s.originTracked.Load(),
		OriginKnown:    s.originKnown.Load(),
		OriginSkipped:  s.originSkipped.Load(),
		OriginRetried:  s.originRetried.Load(),
		OriginReused:   s.originReused.Load(),
		Redriven:       s.redriven.Load(),
		Resent:         s.resent.Load(),

		Held:         s.held.Load(),
		HeldReleased: s.heldReleased.Load(),
		HeldRefused:  s.heldRefused.Load(),
		HeldExpired:  s.heldExpired.Load(),
		HeldLimited:  s.heldLimited.Load(),
	}
}

// Setup creates what the Service needs, in this order, and is idempotent
// (several instances may call it concurrently):
//  1. the completion and status index KV buckets, if absent (FileStorage,
//     Replicas; the completion bucket with History, the index with history
//     1), and the completion bucket's history set to History if it differs
//     (a stream update, never a recreate or purge: see StoreConfig.History);
//  2. the quarantine stream, if absent (subject "<QuarantineSubject>.receipts",
//     FileStorage, DiscardNew, MaxBytes QuarantineMaxBytes); an existing one
//     must capture that subject and must not discard old messages;
//  3. the durable pull consumer on Stream (AckExplicit, AckWait,
//     MaxAckPending 4×BatchSize, deliver all), created or updated;
//  4. with OriginStream: the tracker's durable pull consumer on it (same
//     settings); the stream must use LimitsPolicy retention (else
//     ErrIncompatible).
//
// If Stream or OriginStream does not exist yet, the error wraps
// jetstream.ErrStreamNotFound; Run keeps retrying in that case.
func (s *Service) Setup(ctx context.Context) error {
	if _, err := s.setup(ctx); err != nil {
		return err
	}
	if s.cfg.OriginStream == "" {
		return nil
	}
	_, err := s.setupOrigin(ctx)
	return err
}

func (s *Service) setup(ctx context.Context) (jetstream.Consumer, error) {
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	cons, err := s.cfg.JS.CreateOrUpdateConsumer(ctx, s.cfg.Stream, s.consumerConfig(s.cfg.Consumer, "leafline completion service"))
	if err != nil {
		return nil, fmt.Errorf("receipts: setup: consumer %s on stream %s: %w", s.cfg.Consumer, s.cfg.Stream, err)
	}
	return cons, nil
}

// prepare opens the state and ensures the quarantine stream: what every
// receipts loop needs besides its consumer.
func (s *Service) prepare(ctx context.Context) error {
	if err := s.ensureBucket(ctx); err != nil {
		return err
	}
	return s.ensureQuarantineStream(ctx)
}

func (s *Service) consumerConfig(name, desc string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   desc,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: 4 * s.cfg.BatchSize,
	}
}

func (s *Service) ensureBucket(ctx context.Context) error {
	// The receipts and origin loops set up at once: open the State once.
	s.openMu.Lock()
	defer s.openMu.Unlock()
	if s.state.Load() != nil {
		return nil
	}
	if s.cfg.OpenState != nil {
		st, err := s.cfg.OpenState(ctx)
		if err != nil {
			return fmt.Errorf("receipts: setup: %w", err)
		}
		s.state.CompareAndSwap(nil, &stateRef{st})
		return nil
	}
	st, err := kvstore.OpenStore(ctx, kvstore.StoreConfig{
		JS:           s.cfg.JS,
		Bucket:       s.cfg.Bucket,
		IndexBucket:  s.cfg.IndexBucket,
		Create:       true,
		Replicas:     s.cfg.Replicas,
		History:      s.cfg.History,
		OverdueAfter: s.cfg.OverdueAfter,
		Sites:        s.cfg.Sites,
		CallTimeout:  max(s.cfg.OpTimeout/4, 250*time.Millisecond),
		// The tracker releases what is held.
		HoldUntilOrigin: s.cfg.OriginStream != "",
	})
	if err != nil {
		return fmt.Errorf("receipts: setup: %w", err)
	}
	s.state.CompareAndSwap(nil, &stateRef{st})
	return nil
}

func (s *Service) ensureQuarantineStream(ctx context.Context) error {
	name := s.cfg.QuarantineStream
	st, err := s.cfg.JS.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = s.cfg.JS.CreateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: "leafline receipts that could not be applied",
			Subjects:    []string{s.quarantineSubject},
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardNew,
			MaxBytes:    s.cfg.QuarantineMaxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    s.cfg.Replicas,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = s.cfg.JS.Stream(ctx, name)
		}
	}
	if err != nil {
		return fmt.Errorf("receipts: setup: quarantine stream %s: %w", name, err)
	}
	cfg := st.CachedInfo().Config
	captured := false
	for _, f := range cfg.Subjects {
		captured = captured || subjects.Matches(f, s.quarantineSubject)
	}
	if !captured {
		return fmt.Errorf("receipts: setup: quarantine stream %s does not capture %s: %w", name, s.quarantineSubject, record.ErrIncompatible)
	}
	limited := cfg.MaxMsgs > 0 || cfg.MaxBytes > 0 || cfg.MaxAge > 0 || cfg.MaxMsgsPerSubject > 0
	if cfg.Discard != jetstream.DiscardNew && limited {
		return fmt.Errorf("receipts: setup: quarantine stream %s discards old records at its limits: %w", name, record.ErrIncompatible)
	}
	return nil
}

// Run consumes the receipts stream (and, with OriginStream, follows the
// origin stream) until ctx is done, then returns nil. The two loops run in
// an errgroup: the first fatal error stops both and is returned.
//
// Each loop first sets up its part (see Setup), retrying with backoff while
// its stream does not exist or JetStream is unreachable; a configuration
// conflict (an existing resource it cannot use, a rejected consumer update)
// or a closed connection is returned as an error. If a pull iterator ends
// (consumer deleted, leadership lost) the loop sets up again and resumes.
//
// Messages are applied by InFlight lanes: a message goes to the lane chosen
// by a hash of its event_id, so different events are applied in parallel
// and one event's messages in order; each message is ACKed only after its
// own work succeeded. At most BatchSize messages wait in the pull buffer and
// two per lane in the lanes' queues, whatever the backlog.
//
// Shutdown, in order: stop pulling; each lane finishes the message in hand
// (its KV writes and publish use a context detached from ctx, bounded by
// OpTimeout) and NAKs the messages still queued to it; the messages still
// buffered by the iterator are NAKed, so another instance gets them at
// once; return nil. Nothing unfinished is ever ACKed.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer s.running.Store(false)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return s.loop(gctx, "receipts", s.setup, func(ctx context.Context, cons jetstream.Consumer) error {
			return s.consume(ctx, cons, s.consumeNormal)
		})
	})
	for _, class := range append(slices.Clone(s.cfg.Classes), s.leftoverLanes(ctx)...) {
		g.Go(func() error {
			return s.loop(gctx, "receipts of class "+class, s.setupClass(class), func(ctx context.Context, cons jetstream.Consumer) error {
				return s.consume(ctx, cons, s.consumeReceipts)
			})
		})
	}
	if s.cfg.RedriveAfter > 0 {
		g.Go(func() error { s.redriveLoop(gctx); return nil })
	}
	if s.cfg.OriginStream != "" {
		g.Go(func() error { s.expireHeldLoop(gctx); return nil }) // held.go
	}
	if s.cfg.OriginStream != "" {
		g.Go(func() error {
			return s.loop(gctx, "origin", s.setupOrigin, func(ctx context.Context, cons jetstream.Consumer) error {
				return s.consume(ctx, cons, s.consumeOrigins)
			})
		})
	}
	err := g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// loop sets up and consumes until ctx is done or a fatal error.
func (s *Service) loop(ctx context.Context, what string, setup func(context.Context) (jetstream.Consumer, error), consume func(context.Context, jetstream.Consumer) error) error {
	for failures := 0; ; failures++ {
		cons, err := s.waitReady(ctx, what, setup)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		err = consume(ctx, cons)
		if ctx.Err() != nil {
			return nil
		}
		if isFatal(err) {
			return fmt.Errorf("receipts: consume %s: %w", what, err)
		}
		s.log.Warn("receipts: pull iterator ended; setting up again", "loop", what, "err", err)
		if !ctxsleep.For(ctx, backoff(s.cfg.RetryDelay, failures)) {
			return nil
		}
	}
}

// waitReady runs setup until it succeeds, ctx is done, or a fatal error.
func (s *Service) waitReady(ctx context.Context, what string, setup func(context.Context) (jetstream.Consumer, error)) (jetstream.Consumer, error) {
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		cons, err := setup(actx)
		cancel()
		if err == nil {
			if attempt > 0 {
				s.log.Info("receipts: ready", "loop", what)
			}
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if isFatal(err) {
			return nil, err
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			s.log.Info("receipts: waiting for the stream", "loop", what, "attempt", attempt+1)
		} else {
			s.log.Warn("receipts: setup failed; retrying", "loop", what, "attempt", attempt+1, "err", err)
		}
		if !ctxsleep.For(ctx, backoff(s.cfg.RetryDelay, attempt)) {
			return nil, ctx.Err()
		}
	}
}

// isFatal reports errors that retrying cannot fix.
func isFatal(err error) bool {
	if errors.Is(err, record.ErrIncompatible) || errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusBadRequest
}

// consume pulls with ONE long-lived iterator (Consumer.Messages) rather than
// repeated Fetch calls: the iterator keeps a single pull subscription,
// re-requests when half of its buffer is used (no idle gap between batches),
// and watches heartbeats. Its buffer is BatchSize messages, and each pull
// request asks for at most maxPullBytes (receipts travel in bundles of up
// to MaxBundleBytes); the per-message
// work is O(1) KV round trips spread over InFlight lanes, so the buffer is
// processed far inside AckWait and a reconnect burst does not cause
// redeliveries: one long-lived pull iterator per consumer, since a prefetch
// larger than AckWait allows is redelivered after a reconnect burst. See
// pipeline for the lanes.
func (s *Service) consume(ctx context.Context, cons jetstream.Consumer, run func(context.Context, jetstream.MessagesContext) error) error {
	iter, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(s.cfg.BatchSize, maxPullBytes(s.cfg.JS)))
	if err != nil {
		return err
	}
	defer iter.Stop()
	s.log.Info("receipts: consuming", "consumer", cons.CachedInfo().Name, "stream", cons.CachedInfo().Stream, "batch", s.cfg.BatchSize, "lanes", s.cfg.InFlight)
	err = run(ctx, iter)
	if ctx.Err() != nil {
		s.release(iter)
		return nil
	}
	return err
}

// maxPullBytes bounds the bytes of one pull request: 16 MiB, or twice the
// largest message the server takes if that is more (a request smaller
// than a message would never deliver it).
func maxPullBytes(js jetstream.JetStream) int {
	return max(16<<20, 2*int(js.Conn().MaxPayload()))
}

// release drains the iterator and NAKs (without delay) what it still
// buffered, so those receipts are redelivered now rather than after AckWait.
func (s *Service) release(iter jetstream.MessagesContext) {
	iter.Drain()
	n := 0
	for n < 10*s.cfg.BatchSize { // bounded even if the iterator kept delivering
		msg, err := iter.Next(jetstream.NextMaxWait(time.Second))
		if err != nil {
			break
		}
		_ = msg.Nak()
		n++
	}
	if n > 0 {
		s.log.Info("receipts: released buffered messages on shutdown", "count", n)
	}
}

// handle decides the fate of one message (a receipt or a bundle) and ends
// it with exactly one of: ACK after every receipt in it was recorded or
// quarantined (the quarantine record PubAck'ed); NAK with a delay. ctx
// cancellation does not interrupt a message half-way.
func (s *Service) handle(ctx context.Context, msg jetstream.Msg, prep any) {
	receivedAt := time.Now().UTC()
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	us := s.check(msg, prep)
	if st := s.Store(); st != nil {
		for i := range us {
			if us[i].err == nil {
				u := &us[i]
				u.res.Outcome, u.res.OriginSeq, u.res.Err = st.ApplyReceipt(opCtx, u.r, receivedAt)
			}
		}
	} else {
		s.apply(opCtx, [][]unit{us}, receivedAt)
	}
	s.finish(opCtx, msg, us, receivedAt)
	s.limitHeld(ctx)
}

// unit is one receipt of a message (a bundle holds several) on its way
// through the Service.
type unit struct {
	r   receipt.Receipt
	raw []byte // the receipt's bytes (the whole message's, if unreadable)
	err error  // why it cannot be applied (set by check)
	res record.BatchResult
}

// apply records every unit of msgs that check let through with one
// State.ApplyBatch and stores each result in its unit.
func (s *Service) apply(ctx context.Context, msgs [][]unit, receivedAt time.Time) {
	var items []record.BatchItem
	var at []*unit
	for _, us := range msgs {
		for i := range us {
			if us[i].err == nil {
				items = append(items, record.BatchItem{Receipt: us[i].r, ReceivedAt: receivedAt})
				at = append(at, &us[i])
			}
		}
	}
	if len(items) == 0 {
		return
	}
	for j, r := range s.State().ApplyBatch(ctx, items) {
		at[j].res = r
	}
}

// check returns the units of msg, each decoded, bound, accepted and
// verified; a unit whose err matches ErrQuarantine goes to quarantine. A
// bundle that cannot be read, bound or verified as a whole is one unit.
func (s *Service) check(msg jetstream.Msg, prep any) []unit {
	d := prep.(decoded)
	s.received.Add(uint64(len(d.us)))
	if d.bundle && d.err == nil {
		d.err = s.checkBundle(msg, d.us)
	}
	if d.err != nil {
		return []unit{{raw: msg.Data(), err: d.err}}
	}
	for i := range d.us {
		u := &d.us[i]
		if u.err == nil && d.bundle {
			u.err = s.bindProcessor(u.r) // the bundle's site is bound whole
		} else if u.err == nil {
			u.err = s.bind(u.r, msg.Subject())
		}
		if u.err == nil {
			u.err = s.accept(u.r)
		}
		if u.err == nil && s.cfg.Verify != nil && !d.bundle { // a bundle was verified whole
			if u.r.Verified, u.err = s.cfg.Verify(u.r, msg.Data(), msg.Headers()); u.err != nil {
				u.err = fmt.Errorf("%w: %w", ErrRejected, u.err)
			}
		}
	}
	return d.us
}

// checkBundle binds a bundle as a whole to one site (every receipt names
// it, and so does the subject) and checks its signature once. The
// receipts that could not be decoded stay units of their own.
func (s *Service) checkBundle(msg jetstream.Msg, us []unit) error {
	var rs []receipt.Receipt
	for _, u := range us {
		if u.err == nil {
			rs = append(rs, u.r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	site, err := bundleSite(rs)
	if err != nil {
		return err
	}
	if p := s.cfg.SubjectPrefix; p != "" {
		want := p + "." + site + "." + receipt.BundleToken
		if base, _ := receipt.SplitClass(p, msg.Subject()); base != want {
			return fmt.Errorf("%w: subject %s, but the bundle's receipts say site %s (want %s)",
				ErrSubjectMismatch, receipt.ShortQuote(msg.Subject()), site, want)
		}
	}
	if s.cfg.Verify == nil {
		return nil
	}
	verified, err := s.cfg.Verify(rs[0], msg.Data(), msg.Headers())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	for i := range us {
		us[i].r.Verified = verified
	}
	return nil
}

// finish counts what was done with the receipts of one message and ends
// it: ACK when every unit was recorded (Outcome set, no error) or
// quarantined (its record PubAck'ed); NAK with a delay otherwise. The
// units recorded before a NAK stay recorded: their redelivery counts as
// duplicates.
func (s *Service) finish(opCtx context.Context, msg jetstream.Msg, us []unit, receivedAt time.Time) {
	var meta *jetstream.MsgMetadata // read once, only when needed
	metadata := func() *jetstream.MsgMetadata {
		if meta == nil {
			meta, _ = msg.Metadata() // nil only for a non-JetStream message
		}
		return meta
	}
	var retry error
	for i := range us {
		if err := s.finishUnit(opCtx, msg, metadata, i, len(us), &us[i], receivedAt); err != nil {
			retry = cmp.Or(retry, err)
		}
	}
	if retry != nil {
		s.retry(msg, metadata(), retry)
		return
	}
	// A kill here leaves the records written and the message unACKed:
	// its redelivery must count as Duplicates.
	failpoint.Inject(failpoint.L1AfterKVWrite)
	s.ack(msg)
}

// finishUnit counts one unit's outcome, quarantines it if it must be, and
// returns an error when the message must come again for it.
func (s *Service) finishUnit(opCtx context.Context, msg jetstream.Msg, metadata func() *jetstream.MsgMetadata, i, n int, u *unit, receivedAt time.Time) error {
	r, out, err := u.r, u.res.Outcome, cmp.Or(u.err, u.res.Err)
	if out != 0 { // recorded (err may still report unfinished index work)
		s.lastReceipt.note(r.Processor, receivedAt)
		s.redrive.sawReceipt(r.Processor, u.res.OriginSeq, time.Now())
		switch out {
		case record.Applied:
			s.applied.Add(1)
		case record.Duplicate:
			s.duplicates.Add(1)
		case record.Conflict:
			s.conflicts.Add(1)
			s.log.Warn("receipts: conflicting status ignored", append(logAttrs(metadata()), "event_id", receipt.ShortQuote(r.EventID), "processor", r.Processor, "status", r.Status)...)
		case record.Held:
			s.held.Add(1)
			s.noteHeld(r, receivedAt)
			s.log.Warn("receipts: receipt held: its event's origin has not been seen", append(logAttrs(metadata()), "event_id", receipt.ShortQuote(r.EventID), "processor", r.Processor, "receipt_site", r.Site, "status", r.Status)...)
		}
		// ErrIndexIncomplete: redeliver so the repeat finishes the index.
		return err
	}
	if !errors.Is(err, receipt.ErrQuarantine) {
		return err
	}
	created, qerr := s.publishQuarantine(opCtx, msg, metadata(), quarantined{raw: u.raw, index: i, of: n}, receivedAt, err)
	if qerr != nil {
		return qerr
	}
	refusal := RefusalReason(err)
	if created {
		s.quarantined.Add(1)
		s.refused.add(refusal)
	}
	s.log.Warn("receipts: quarantined", append(logAttrs(metadata()), "subject", msg.Subject(), "refusal", refusal, "reason", err)...)
	return nil
}

// accept runs cfg.Accept; a rejection wraps ErrRejected, a panic is a
// transient error.
func (s *Service) accept(r receipt.Receipt) (err error) {
	if s.cfg.Accept == nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("receipts: Accept panicked: %v", p)
		}
	}()
	if aerr := s.cfg.Accept(r); aerr != nil {
		return fmt.Errorf("%w: %w", ErrRejected, aerr)
	}
	return nil
}

func (s *Service) ack(msg jetstream.Msg) {
	if err := msg.Ack(); err != nil {
		// The work is committed; the redelivery will be absorbed (counted
		// as a duplicate, or deduplicated in the quarantine stream).
		meta, _ := msg.Metadata()
		s.log.Warn("receipts: ack failed; message will be redelivered", append(logAttrs(meta), "err", err)...)
	}
}

func (s *Service) retry(msg jetstream.Msg, meta *jetstream.MsgMetadata, cause error) {
	s.retried.Add(1)
	s.nakLater(msg, meta, cause)
}

// nakLater NAKs msg with a delay that doubles per delivery.
func (s *Service) nakLater(msg jetstream.Msg, meta *jetstream.MsgMetadata, cause error) {
	delivered := 1
	if meta != nil && meta.NumDelivered > 0 {
		delivered = int(min(meta.NumDelivered, 64))
	}
	delay := backoff(s.cfg.RetryDelay, delivered-1)
	s.log.Warn("receipts: will retry", append(logAttrs(meta), "delay", delay, "err", cause)...)
	if err := msg.NakWithDelay(delay); err != nil {
		s.log.Warn("receipts: nak failed; message will be redelivered after AckWait", append(logAttrs(meta), "err", err)...)
	}
}

func logAttrs(meta *jetstream.MsgMetadata) []any {
	if meta == nil {
		return nil
	}
	return []any{"stream", meta.Stream, "seq", meta.Sequence.Stream, "delivered", meta.NumDelivered}
}

// backoff returns base·2^n, capped at MaxRetryDelay.
func backoff(base time.Duration, n int) time.Duration {
	d := base
	for i := 0; i < n && d < MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, MaxRetryDelay)
}
