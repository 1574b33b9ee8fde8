package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Publisher publishes records. Publish returns nil only when every record
// has been PubAck'ed (a duplicate ack counts as success). It is called with
// records that may already have been published: it must set the message id
// (Nats-Msg-Id) to Record.Key so that the stream, and every consumer after
// it, can drop the duplicates. A Publisher that PubAck'ed some records
// before it failed should say which with a *PartialError.
type Publisher interface {
	Publish(ctx context.Context, recs []Record) error
}

// PartialError is a Publish error that names the records that were
// PubAck'ed all the same: Published holds their indexes in the slice given
// to Publish. The Relay marks those published at once. Left pending, they
// would be published again on the next try, and a try after the stream's
// duplicate window (the Relay backs off up to 30s while a full stream
// refuses) stores a copy, which fills the stream further.
type PartialError struct {
	Published []int
	Err       error
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("%d records published, then: %v", len(e.Published), e.Err)
}

func (e *PartialError) Unwrap() error { return e.Err }

// PartiallyPublished returns the records of recs that err, a Publish
// error, says were PubAck'ed: none unless it wraps a *PartialError.
// Indexes outside recs are ignored.
func PartiallyPublished(recs []Record, err error) []Record {
	var partial *PartialError
	if !errors.As(err, &partial) {
		return nil
	}
	var out []Record
	for _, i := range partial.Published {
		if i >= 0 && i < len(recs) {
			out = append(out, recs[i])
		}
	}
	return out
}

// RelayConfig configures a Relay. Zero (or negative) values mean the
// documented defaults.
type RelayConfig struct {
	Interval  time.Duration // how often it looks; zero = 1s
	MinAge    time.Duration // only republish records pending at least this long (the runner publishes fresh ones itself); zero = 2s
	BatchSize int           // records per Publish call; zero = 256
	Timeout   time.Duration // per Publish call; zero = 5s
	Logger    *slog.Logger  // nil = slog.Default(); Data is never logged
	// OnPublished, if set, is called with the number of records marked
	// published each time the relay marks some: a whole batch, or what a
	// *PartialError named (metrics hook).
	OnPublished func(n int)
	// OnError, if set, is called with every Publish error (metrics hook).
	OnError func(err error)
}

// maxBackoff caps the wait after consecutive Publish failures.
const maxBackoff = 30 * time.Second

func (c *RelayConfig) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.MinAge <= 0 {
		c.MinAge = 2 * time.Second
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 256
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Relay republishes records left pending: by a crash between Commit and
// MarkPublished, a PubAck timeout, or a runner that gave up. It gives
// at-least-once delivery of every committed record to the Publisher.
type Relay struct {
	o    *Outbox
	p    Publisher
	cfg  RelayConfig
	kick chan struct{}
}

// NewRelay returns a Relay for o that publishes with p. It panics if o or p
// is nil (a programming error).
func NewRelay(o *Outbox, p Publisher, cfg RelayConfig) *Relay {
	if o == nil || p == nil {
		panic("outbox: NewRelay: nil Outbox or Publisher")
	}
	cfg.setDefaults()
	return &Relay{o: o, p: p, cfg: cfg, kick: make(chan struct{}, 1)}
}

// Kick makes Run look now instead of at its next tick, even while it backs
// off after a failure. It never blocks; kicks while one is waiting are
// merged.
func (r *Relay) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run republishes pending records until ctx is done, then returns nil.
//
// Every Interval (at once on start, on Kick, and immediately again while
// full batches keep coming) it reads up to BatchSize pending records that
// are at least MinAge old by the Outbox clock, publishes them in one
// Publish call bounded by Timeout, and marks them published when Publish
// returns nil.
//
// A Publish error is logged, reported to OnError and retried: the next look
// waits Interval doubled per consecutive failure, capped at 30s (or
// Interval, if larger). After a failure only the records a *PartialError
// names are marked; the rest of the batch is published again. An error
// from the Outbox (Pending or MarkPublished: bbolt, ErrCorrupt, ErrClosed)
// is fatal: Run returns it.
//
// The runner and the Relay may publish the same record concurrently when
// the runner is slower than MinAge; that is harmless (see Publisher).
func (r *Relay) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-r.kick:
		}
		n, err := r.once(ctx)
		wait := r.cfg.Interval
		switch {
		case err != nil && !isPublishErr(err):
			return err
		case ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			wait = backoff(r.cfg.Interval, failures)
			r.cfg.Logger.Warn("outbox relay: publish failed; records stay pending",
				"records", n, "failures", failures, "retry_in", wait, "err", err)
			if r.cfg.OnError != nil {
				r.cfg.OnError(err)
			}
		default:
			if failures > 0 {
				r.cfg.Logger.Info("outbox relay: publishing again", "after_failures", failures)
			}
			failures = 0
			if n == r.cfg.BatchSize {
				wait = 0 // more may be waiting
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

type publishError struct{ err error }

func (e *publishError) Error() string { return e.err.Error() }
func (e *publishError) Unwrap() error { return e.err }

func isPublishErr(err error) bool { _, ok := err.(*publishError); return ok }

// once publishes one batch and returns its size.
func (r *Relay) once(ctx context.Context) (int, error) {
	recs, err := r.o.Pending(r.cfg.BatchSize, r.o.now().Add(-r.cfg.MinAge))
	if err != nil {
		return 0, fmt.Errorf("outbox relay: %w", err)
	}
	if len(recs) == 0 {
		return 0, nil
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	err = r.p.Publish(pctx, recs)
	cancel()
	if err != nil {
		if err := r.mark(keysOf(PartiallyPublished(recs, err))); err != nil {
			return len(recs), err
		}
		return len(recs), &publishError{fmt.Errorf("outbox relay: publish %d records (first key %q): %w", len(recs), recs[0].Key, err)}
	}
	if err := r.mark(keysOf(recs)); err != nil {
		return len(recs), err
	}
	r.cfg.Logger.Debug("outbox relay: republished", "records", len(recs))
	return len(recs), nil
}

// mark marks keys published; an error is the Outbox's, and fatal.
func (r *Relay) mark(keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if err := r.o.MarkPublished(keys); err != nil {
		return fmt.Errorf("outbox relay: %w", err)
	}
	if r.cfg.OnPublished != nil {
		r.cfg.OnPublished(len(keys))
	}
	return nil
}

// keysOf returns the keys of rs.
func keysOf(rs []Record) []string {
	out := make([]string, len(rs))
	for i := range rs {
		out[i] = rs[i].Key
	}
	return out
}

// backoff returns the wait after the given number of consecutive failures.
func backoff(interval time.Duration, failures int) time.Duration {
	limit := max(maxBackoff, interval)
	d := interval
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
