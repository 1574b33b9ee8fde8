package receipts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stats are the Service's counters since NewService. Each receipt message
// delivered to the Service is counted in Received, and then in at most one
// of the others (none when it was NAKed for a retry).
type Stats struct {
	Received    uint64 // messages delivered by the consumer, redeliveries included
	Applied     uint64 // first terminal status for (event_id, processor) recorded
	Duplicates  uint64 // same status as already recorded; counted in the KV record
	Conflicts   uint64 // different status than already recorded; counted, not applied
	Quarantined uint64 // new quarantine records stored (PubAck'ed, not a dedupe hit)
	Retried     uint64 // messages NAKed with a delay after a transient failure
}

// Service is the L1 completion service: it consumes a receipts stream and
// records each receipt in a Store. Several Services (in one process or many)
// may share one consumer and one bucket. See the package documentation for
// the per-message rules.
type Service struct {
	cfg               ServiceConfig
	log               *slog.Logger
	quarantineSubject string
	store             atomic.Pointer[Store]
	running           atomic.Bool

	received, applied, duplicates, conflicts, quarantined, retried atomic.Uint64
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

// Store returns the completion store, or nil until Setup (or Run) has opened
// the bucket.
func (s *Service) Store() *Store { return s.store.Load() }

// Stats returns a snapshot of the counters.
func (s *Service) Stats() Stats {
	return Stats{
		Received:    s.received.Load(),
		Applied:     s.applied.Load(),
		Duplicates:  s.duplicates.Load(),
		Conflicts:   s.conflicts.Load(),
		Quarantined: s.quarantined.Load(),
		Retried:     s.retried.Load(),
	}
}

// Setup creates what the Service needs, in this order, and is idempotent
// (several instances may call it concurrently):
//  1. the KV bucket, if absent (History 1, FileStorage, Replicas);
//  2. the quarantine stream, if absent (subject "<QuarantineSubject>.receipts",
//     FileStorage, DiscardNew, MaxBytes QuarantineMaxBytes); an existing one
//     must capture that subject and must not discard old messages;
//  3. the durable pull consumer on Stream (AckExplicit, AckWait,
//     MaxAckPending 4×BatchSize, deliver all), created or updated.
//
// If Stream does not exist yet, steps 1–2 are done and the error wraps
// jetstream.ErrStreamNotFound; Run keeps retrying in that case.
func (s *Service) Setup(ctx context.Context) error {
	_, err := s.setup(ctx)
	return err
}

func (s *Service) setup(ctx context.Context) (jetstream.Consumer, error) {
	if err := s.ensureBucket(ctx); err != nil {
		return nil, err
	}
	if err := s.ensureQuarantineStream(ctx); err != nil {
		return nil, err
	}
	cons, err := s.cfg.JS.CreateOrUpdateConsumer(ctx, s.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       s.cfg.Consumer,
		Description:   "leafline completion service",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: 4 * s.cfg.BatchSize,
	})
	if err != nil {
		return nil, fmt.Errorf("receipts: setup: consumer %s on stream %s: %w", s.cfg.Consumer, s.cfg.Stream, err)
	}
	return cons, nil
}

func (s *Service) ensureBucket(ctx context.Context) error {
	if s.store.Load() != nil {
		return nil
	}
	kv, err := s.cfg.JS.KeyValue(ctx, s.cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = s.cfg.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      s.cfg.Bucket,
			Description: "leafline completions, one key per event_id",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    s.cfg.Replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another instance won the race
			kv, err = s.cfg.JS.KeyValue(ctx, s.cfg.Bucket)
		}
	}
	if err != nil {
		return fmt.Errorf("receipts: setup: bucket %s: %w", s.cfg.Bucket, err)
	}
	s.store.CompareAndSwap(nil, NewStore(kv))
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
		captured = captured || subjectMatches(f, s.quarantineSubject)
	}
	if !captured {
		return fmt.Errorf("receipts: setup: quarantine stream %s does not capture %s: %w", name, s.quarantineSubject, ErrIncompatible)
	}
	limited := cfg.MaxMsgs > 0 || cfg.MaxBytes > 0 || cfg.MaxAge > 0 || cfg.MaxMsgsPerSubject > 0
	if cfg.Discard != jetstream.DiscardNew && limited {
		return fmt.Errorf("receipts: setup: quarantine stream %s discards old records at its limits: %w", name, ErrIncompatible)
	}
	return nil
}

// Run consumes the receipts stream until ctx is done, then returns nil.
//
// It first runs Setup, retrying with backoff while the receipts stream does
// not exist or JetStream is unreachable; a configuration conflict (an
// existing resource it cannot use, a rejected consumer update) or a closed
// connection is returned as an error. If the pull iterator ends (consumer
// deleted, leadership lost) Run sets up again and resumes.
//
// Shutdown, in order: stop pulling; finish the message in hand (its KV
// write and publish use a context detached from ctx, bounded by OpTimeout);
// NAK the messages still buffered so another instance gets them at once;
// return nil. Nothing unfinished is ever ACKed.
func (s *Service) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer s.running.Store(false)

	for failures := 0; ; failures++ {
		cons, err := s.waitReady(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		err = s.consume(ctx, cons)
		if ctx.Err() != nil {
			return nil
		}
		if isFatal(err) {
			return fmt.Errorf("receipts: consume: %w", err)
		}
		s.log.Warn("receipts: pull iterator ended; setting up again", "err", err)
		if !sleep(ctx, backoff(s.cfg.RetryDelay, failures)) {
			return nil
		}
	}
}

// waitReady runs setup until it succeeds, ctx is done, or a fatal error.
func (s *Service) waitReady(ctx context.Context) (jetstream.Consumer, error) {
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		cons, err := s.setup(actx)
		cancel()
		if err == nil {
			if attempt > 0 {
				s.log.Info("receipts: ready")
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
			s.log.Info("receipts: waiting for the receipts stream", "attempt", attempt+1)
		} else {
			s.log.Warn("receipts: setup failed; retrying", "attempt", attempt+1, "err", err)
		}
		if !sleep(ctx, backoff(s.cfg.RetryDelay, attempt)) {
			return nil, ctx.Err()
		}
	}
}

// isFatal reports errors that retrying cannot fix.
func isFatal(err error) bool {
	if errors.Is(err, ErrIncompatible) || errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusBadRequest
}

// consume pulls with ONE long-lived iterator (Consumer.Messages) rather than
// repeated Fetch calls: the iterator keeps a single pull subscription,
// re-requests when half of its buffer is used (no idle gap between batches),
// and watches heartbeats. Its buffer is BatchSize messages; the per-message
// work is O(1) KV round trips, so the buffer is processed far inside AckWait
// and a reconnect burst does not cause redeliveries (see DESIGN.md: keep one
// long-lived pull iterator per consumer).
//
// Messages are handled one at a time, in order. To add a bounded window of
// concurrent Applies later: decode here, then dispatch each message to one of
// K lanes chosen by hash(KVKey(event_id)) (quarantined messages to any lane),
// each lane a goroutine with a small queue. Different event_ids proceed in
// parallel; one event_id always lands in the same lane and stays serialized
// (not needed for correctness, as Apply is CAS-safe, but it avoids
// self-inflicted CAS retries). handle already owns the whole per-message
// outcome (ACK/NAK), so lanes need no shared state beyond the counters.
func (s *Service) consume(ctx context.Context, cons jetstream.Consumer) error {
	iter, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.BatchSize))
	if err != nil {
		return err
	}
	defer iter.Stop()
	s.log.Info("receipts: consuming", "batch", s.cfg.BatchSize)
	for {
		msg, err := iter.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			// Next may return a buffered message even when ctx is done.
			if err == nil {
				_ = msg.Nak()
			}
			s.release(iter)
			return nil
		}
		if err != nil {
			return err
		}
		s.handle(ctx, msg)
	}
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

// handle decides the fate of one message and ends it with exactly one of:
// ACK after the KV write; ACK after the quarantine record's PubAck; NAK with
// a delay. ctx cancellation does not interrupt a message half-way.
func (s *Service) handle(ctx context.Context, msg jetstream.Msg) {
	s.received.Add(1)
	receivedAt := time.Now().UTC()
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()

	meta, _ := msg.Metadata() // nil only for a non-JetStream message

	r, err := Decode(msg.Data())
	if err == nil {
		err = s.accept(r)
	}
	if err == nil {
		var out Outcome
		if out, err = s.Store().ApplyOutcome(opCtx, r, receivedAt); err == nil {
			switch out {
			case Applied:
				s.applied.Add(1)
			case Duplicate:
				s.duplicates.Add(1)
			case Conflict:
				s.conflicts.Add(1)
				s.log.Warn("receipts: conflicting status ignored", append(logAttrs(meta), "event_id", quoteShort(r.EventID), "processor", r.Processor, "status", r.Status)...)
			}
			s.ack(msg, meta)
			return
		}
	}
	if errors.Is(err, ErrQuarantine) {
		created, qerr := s.publishQuarantine(opCtx, msg, meta, receivedAt, err)
		if qerr != nil {
			s.retry(msg, meta, qerr)
			return
		}
		if created {
			s.quarantined.Add(1)
		}
		s.log.Warn("receipts: quarantined", append(logAttrs(meta), "subject", msg.Subject(), "reason", err)...)
		s.ack(msg, meta)
		return
	}
	s.retry(msg, meta, err)
}

// accept runs cfg.Accept; a rejection wraps ErrRejected, a panic is a
// transient error.
func (s *Service) accept(r Receipt) (err error) {
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

func (s *Service) ack(msg jetstream.Msg, meta *jetstream.MsgMetadata) {
	if err := msg.Ack(); err != nil {
		// The work is committed; the redelivery will be absorbed (counted
		// as a duplicate, or deduplicated in the quarantine stream).
		s.log.Warn("receipts: ack failed; message will be redelivered", append(logAttrs(meta), "err", err)...)
	}
}

func (s *Service) retry(msg jetstream.Msg, meta *jetstream.MsgMetadata, cause error) {
	s.retried.Add(1)
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
	return []any{"seq", meta.Sequence.Stream, "delivered", meta.NumDelivered}
}

// backoff returns base·2^n, capped at MaxRetryDelay.
func backoff(base time.Duration, n int) time.Duration {
	d := base
	for i := 0; i < n && d < MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, MaxRetryDelay)
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
