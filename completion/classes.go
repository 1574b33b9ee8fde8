package completion

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/receipt"
)

// The class lanes of the receipts (ServiceConfig.Classes; package doc,
// # Class lanes): a consumer per lane beside Consumer, which leaves the
// lanes' receipts to them.

// leftoverLanes are the classes of lane consumers on Stream that Classes
// no longer names: each is consumed as before, so that what it holds
// (receipts that Consumer left to it) is applied. It is run again, its
// consumer updated to the same filter, until it is deleted by hand.
func (s *Service) leftoverLanes(ctx context.Context) []string {
	if s.cfg.SubjectPrefix == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	st, err := s.cfg.JS.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return nil // no stream yet: no lane either
	}
	var out []string
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		if class, ok := receipt.LaneOf(s.cfg.Consumer, name); ok && !slices.Contains(s.cfg.Classes, class) {
			out = append(out, class)
		}
	}
	if err := names.Err(); err != nil {
		s.log.Warn("receipts: could not list the lanes' consumers; a lane of a class no longer configured is not applied until the next start", "err", err)
	}
	if len(out) > 0 {
		s.log.Info("receipts: applying the lanes of classes no longer configured", "classes", out)
	}
	return out
}

// setupClass is setup for the consumer of class's lane.
func (s *Service) setupClass(class string) func(context.Context) (jetstream.Consumer, error) {
	return func(ctx context.Context) (jetstream.Consumer, error) {
		if err := s.prepare(ctx); err != nil {
			return nil, err
		}
		name := receipt.ClassConsumer(s.cfg.Consumer, class)
		cfg := s.consumerConfig(name, "leafline completion service, receipts of class "+class)
		cfg.FilterSubject = receipt.ClassSubject(s.cfg.SubjectPrefix+".*.*", class)
		cons, err := s.cfg.JS.CreateOrUpdateConsumer(ctx, s.cfg.Stream, cfg)
		if err != nil {
			return nil, fmt.Errorf("receipts: setup: consumer %s on stream %s: %w", name, s.cfg.Stream, err)
		}
		return cons, nil
	}
}

// consumeNormal is consumeReceipts for Consumer, which ACKs, without
// applying them, the receipts in a class lane of Classes: that lane's
// consumer holds them until it has applied them.
func (s *Service) consumeNormal(ctx context.Context, iter jetstream.MessagesContext) error {
	if len(s.cfg.Classes) > 0 {
		iter = laneSkipper{iter, s.cfg.SubjectPrefix, s.cfg.Classes}
	}
	return s.consumeReceipts(ctx, iter)
}

// laneSkipper passes on the messages of a MessagesContext but those in
// the class lanes classes, which it ACKs.
type laneSkipper struct {
	jetstream.MessagesContext
	prefix  string
	classes []string
}

func (l laneSkipper) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	for {
		msg, err := l.MessagesContext.Next(opts...)
		if err != nil {
			return msg, err
		}
		if _, c := receipt.SplitClass(l.prefix, msg.Subject()); c == "" || !slices.Contains(l.classes, c) {
			return msg, nil
		}
		_ = msg.Ack()
	}
}
