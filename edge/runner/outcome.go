package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/sink"
)

// applyMaxDeliver turns a temporary failure on the last allowed delivery
// into a permanent one when max_deliver_action is dead_letter.
func (r *Runner) applyMaxDeliver(items []item) {
	d := r.cfg.Delivery
	if d.MaxDeliver <= 0 {
		return
	}
	for i := range items {
		it := &items[i]
		if it.err == nil || sink.IsPermanent(it.err) || it.meta.NumDelivered < uint64(d.MaxDeliver) {
			continue
		}
		if d.MaxDeliverAction == "dead_letter" {
			r.metrics.MaxDeliverExhausted.Inc()
			it.err = fmt.Errorf("%w: %w", errMaxDeliver, it.err)
		}
	}
}

// lastDelivery counts and logs a message that the server will not deliver
// again (max_deliver reached with max_deliver_action leave): never silent.
func (r *Runner) lastDelivery(it *item) {
	d := r.cfg.Delivery
	if d.MaxDeliver > 0 && d.MaxDeliverAction != "dead_letter" && it.meta.NumDelivered >= uint64(d.MaxDeliver) {
		r.metrics.MaxDeliverExhausted.Inc()
		r.log.Warn("max deliveries reached: the server will not redeliver this message (max_deliver_action leave)",
			r.attrs(it, "max_deliver", d.MaxDeliver)...)
	}
}

// finish sends each message's final acknowledgement according to its outcome.
func (r *Runner) finish(ctx context.Context, items []item) {
	m := r.metrics
	for i := range items {
		it := &items[i]
		switch {
		case it.hold != nil:
			r.retry(it, it.hold)
		case it.expired:
			// Its expired receipt is PubAck'ed: the event is finished
			// without the sink, as a dead-lettered one is without its DLQ.
			if r.ack(ctx, it) {
				m.Expired.Inc()
			}
		case it.err == nil:
			if r.ack(ctx, it) {
				m.Processed.Inc()
			}
		case it.dead:
			if it.newDead {
				m.DeadLettered.Inc()
				if errors.Is(it.err, sink.ErrWorkerCrash) {
					m.PoisonEvents.Inc()
				}
			}
			r.logDeadLetter(it)
			if r.cfg.DeadLetter.AckTermAfterPub {
				r.term(ctx, it)
			} else {
				r.ack(ctx, it)
			}
		case sink.IsPermanent(it.err):
			// No DLQ configured: never ACK as processed; leave it for the
			// operator and count it.
			r.lastDelivery(it)
			m.PermanentUnacked.Inc()
			r.step("leave", it)
			r.log.Warn("permanent failure left unacked (no DLQ configured)", r.attrs(it, "error_type", errorType(it.err))...)
		default:
			r.retry(it, it.err)
		}
	}
}

// retry handles a temporary failure: NAK with backoff, or leave the message
// for redelivery after AckWait.
func (r *Runner) retry(it *item, cause error) {
	r.lastDelivery(it)
	if r.cfg.Delivery.Retry.TemporaryFailureAction == "leave_unacked" {
		r.step("leave", it)
		r.log.Info("temporary failure left unacked", r.attrs(it, "reason", cause.Error())...)
		return
	}
	// The target's own delay (an HTTP Retry-After, say) when it asks for
	// a longer one than the backoff.
	delay := max(r.backoff(it.meta.NumDelivered), min(sink.RetryDelay(cause), maxRetryAfter))
	r.step("nak", it)
	if err := it.msg.NakWithDelay(delay); err != nil {
		r.log.Warn("nak failed; the message will be redelivered after AckWait", r.attrs(it, "err", err)...)
		return
	}
	r.metrics.Nacked.Inc()
	r.log.Info("nak", r.attrs(it, "delay", delay, "reason", cause.Error())...)
}

// ack sends the final ACK, confirmed (DoubleAck) when configured. A failed
// or timed-out confirmation is a redelivery-risk event: counted and logged;
// the message may come back and is then an idempotent duplicate.
func (r *Runner) ack(ctx context.Context, it *item) bool {
	conf := r.cfg.Delivery.AckConfirmation
	if !conf.Enabled {
		r.step("ack", it)
		if err := it.msg.Ack(); err != nil {
			r.log.Warn("ack failed; the message will be redelivered and handled as a duplicate", r.attrs(it, "err", err)...)
			return false
		}
		r.metrics.Acked.Inc()
		r.log.Debug("ack", r.attrs(it)...)
		return true
	}
	r.step("double_ack", it)
	err := r.confirm(ctx, it, func(cctx context.Context) error { return it.msg.DoubleAck(cctx) })
	if err != nil {
		return false
	}
	r.metrics.Acked.Inc()
	return true
}

// term terminates a dead-lettered message. With confirmation enabled the
// +TERM is sent as a request on the message's reply subject, which the
// server answers: a confirmed AckTerm.
func (r *Runner) term(ctx context.Context, it *item) {
	conf := r.cfg.Delivery.AckConfirmation
	if !conf.Enabled {
		r.step("term", it)
		if err := it.msg.Term(); err != nil {
			r.log.Warn("term failed; the message will be redelivered and dead-lettered again idempotently", r.attrs(it, "err", err)...)
			return
		}
		r.metrics.Terminated.Inc()
		r.log.Info("term", r.attrs(it)...)
		return
	}
	r.step("confirmed_term", it)
	err := r.confirm(ctx, it, func(cctx context.Context) error {
		_, err := r.nc.RequestWithContext(cctx, it.msg.Reply(), []byte("+TERM"))
		return err
	})
	if err == nil {
		r.metrics.Terminated.Inc()
	}
}

func (r *Runner) confirm(ctx context.Context, it *item, send func(context.Context) error) error {
	m := r.metrics
	m.AckConfAttempts.Inc()
	cctx, cancel := context.WithTimeout(ctx, time.Duration(r.cfg.Delivery.AckConfirmation.TimeoutMS)*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := send(cctx)
	m.AckConfSeconds.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		m.AckConfSuccesses.Inc()
		r.log.Debug("confirmed", r.attrs(it)...)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		m.AckConfTimeouts.Inc()
		r.log.Warn("confirm-timeout: durable work is done but the server did not confirm; the message may be redelivered and will be handled as a duplicate", r.attrs(it, "err", err)...)
	default:
		m.AckConfFailures.Inc()
		r.log.Warn("confirm-failed: durable work is done but the confirmation failed; the message may be redelivered and will be handled as a duplicate", r.attrs(it, "err", err)...)
	}
	return err
}
