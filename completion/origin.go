package completion

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology/subjects"
)

// The origin tracker: a second loop of the Service that follows the origin
// stream with its own durable consumer and gives every published event a
// pending record (Store.ApplyOrigin). It ACKs its own consumer only; on a
// LimitsPolicy stream that deletes nothing and touches no other consumer.

// setupOrigin opens the buckets and creates or updates the tracker's
// consumer, after checking the origin stream's retention.
func (s *Service) setupOrigin(ctx context.Context) (jetstream.Consumer, error) {
	if err := s.ensureBucket(ctx); err != nil {
		return nil, err
	}
	if err := s.ensureUnidentified(ctx); err != nil {
		return nil, err
	}
	name := s.cfg.OriginStream
	st, err := s.cfg.JS.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("receipts: setup: origin stream %s: %w", name, err)
	}
	if r := st.CachedInfo().Config.Retention; r != jetstream.LimitsPolicy {
		return nil, fmt.Errorf("receipts: setup: origin stream %s has %s retention; the tracker needs LimitsPolicy so that its ACKs delete nothing: %w", name, r, record.ErrIncompatible)
	}
	cons, err := s.cfg.JS.CreateOrUpdateConsumer(ctx, name, s.consumerConfig(s.cfg.OriginConsumer, "leafline origin tracker (ACKs record progress only)"))
	if err != nil {
		return nil, fmt.Errorf("receipts: setup: consumer %s on stream %s: %w", s.cfg.OriginConsumer, name, err)
	}
	return cons, nil
}

// originPrep is what prepareOrigin hands to handleOrigin.
type originPrep struct {
	id  string
	err error
}

func (s *Service) prepareOrigin(msg jetstream.Msg) (uint64, any) {
	id, err := s.originEventID(msg)
	if err == nil {
		err = receipt.ValidateEventID(id)
	}
	if err != nil {
		return seqHash(msg), originPrep{err: err}
	}
	return laneHash(id), originPrep{id: id}
}

func (s *Service) originEventID(msg jetstream.Msg) (id string, err error) {
	if s.cfg.OriginEventID == nil {
		if id = msg.Headers().Get(s.cfg.OriginHeader); id == "" {
			return "", fmt.Errorf("header %s missing", s.cfg.OriginHeader)
		}
		return id, nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("OriginEventID panicked: %v", p)
		}
	}()
	return s.cfg.OriginEventID(msg)
}

// expected runs cfg.Expected, turning a panic into an error.
func (s *Service) expected(subject string) (procs []string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("receipts: Expected panicked: %v", p)
		}
	}()
	return s.cfg.Expected(subject), nil
}

// handleOrigin records one origin message and ends it with exactly one of:
// ACK after the record (or the merge) is written; ACK of a message that can
// never be tracked (no usable event_id, invalid expected set), counted in
// OriginSkipped; NAK with a delay for anything transient.
func (s *Service) handleOrigin(ctx context.Context, msg jetstream.Msg, prep any) {
	s.originReceived.Add(1)
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OpTimeout)
	defer cancel()
	meta, merr := msg.Metadata()
	p := prep.(originPrep)
	if merr != nil || p.err != nil {
		// Recorded before the ACK (see unidentified.go), so that it is
		// counted and listed however often the service restarts.
		if merr == nil {
			if err := s.recordUnidentified(opCtx, msg, meta, p.err); err != nil {
				s.originRetried.Add(1)
				s.nakLater(msg, meta, err)
				return
			}
		}
		s.originSkipped.Add(1)
		s.log.Warn("receipts: origin message without a usable event_id; not tracked, recorded as unidentified", append(logAttrs(meta), "subject", msg.Subject(), "err", errors.Join(merr, p.err))...)
		s.ack(msg)
		return
	}
	expected, err := s.expected(msg.Subject())
	if err != nil {
		s.originRetried.Add(1)
		s.nakLater(msg, meta, err)
		return
	}
	o := record.Origin{
		EventID: p.id, Stream: meta.Stream, Subject: msg.Subject(), Seq: meta.Sequence.Stream,
		PublishedAt: meta.Timestamp, Expected: expected, Digest: receipt.PayloadDigest(msg.Data()),
	}
	if st := s.Store(); st != nil {
		out, hr, err := st.ApplyOriginRelease(opCtx, o, time.Now())
		s.finishOrigin(msg, meta, o, out, hr, err)
		return
	}
	r := s.State().ApplyOriginBatch(opCtx, []record.Origin{o}, time.Now())[0]
	s.finishOrigin(msg, meta, o, r.Outcome, r.Held, r.Err)
}

// finishOrigin counts what was done with one origin message and ends it:
// ACK after its record was written, ACK of one that can never be tracked,
// NAK with a delay otherwise.
func (s *Service) finishOrigin(msg jetstream.Msg, meta *jetstream.MsgMetadata, o record.Origin, out record.OriginOutcome, hr record.HeldRelease, err error) {
	switch out {
	case record.OriginCreated, record.OriginMerged:
		s.originTracked.Add(1)
		s.countReleased(meta, o.EventID, hr)
	case record.OriginKnown:
		s.originKnown.Add(1)
	case record.OriginReused:
		s.originKnown.Add(1)
		s.originReused.Add(1)
		s.log.Warn("receipts: event_id reused with another payload: the first publication stands; the event is marked a conflict", append(logAttrs(meta), "event_id", receipt.ShortQuote(o.EventID), "subject", msg.Subject(), "payload_sha256", o.Digest)...)
	}
	switch {
	case err == nil:
		s.ack(msg)
	case errors.Is(err, receipt.ErrInvalid):
		s.originSkipped.Add(1)
		s.log.Error("receipts: origin event not tracked: Expected returned invalid processors", append(logAttrs(meta), "event_id", receipt.ShortQuote(o.EventID), "err", err)...)
		s.ack(msg)
	default: // transient, ErrIndexIncomplete, or a corrupt record to repair
		s.originRetried.Add(1)
		s.nakLater(msg, meta, err)
	}
}

// ExpectedByFilter returns a ServiceConfig.Expected function: the
// processors (keys) whose subject filter (values; NATS wildcards, "" = every
// subject) matches the subject, sorted. For leafline: every edge site and its
// filter from the topology.
func ExpectedByFilter(filters map[string]string) func(subject string) []string {
	type pf struct{ proc, filter string }
	var list []pf
	for p, f := range filters {
		list = append(list, pf{p, f})
	}
	return func(subject string) []string {
		var out []string
		for _, e := range list {
			if e.filter == "" || subjects.Matches(e.filter, subject) {
				out = append(out, e.proc)
			}
		}
		return record.NormalizeNames(out)
	}
}
