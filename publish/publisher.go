package publish

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/jsmsg"
)

// Defaults of Config.
const (
	// DefaultBatch events per atomic batch; the server allows 1000.
	DefaultBatch = 1000
	// MaxBatch is the server's default limit on one atomic batch.
	MaxBatch = 1000
	// DefaultAttempts is how often a batch whose answer was lost is sent.
	DefaultAttempts = 3
	// DefaultTimeout bounds one batch's round trip.
	DefaultTimeout = 10 * time.Second
	// DefaultRetryFor is how long a batch is retried while the stream
	// has no leader: long enough for a cluster's election on a loaded
	// machine.
	DefaultRetryFor = time.Minute
)

// retryWait is the first pause between two attempts; it doubles up to
// retryWaitMax.
const (
	retryWait    = 250 * time.Millisecond
	retryWaitMax = 2 * time.Second
)

// expectedStreamHeader makes the server refuse an event that a stream other
// than the origin stream would store.
const expectedStreamHeader = "Nats-Expected-Stream"

// PublishedAtHeader carries each event's publish time (RFC 3339, UTC): the
// edge measures an event's age from it when the topology or the event
// sets an expiry (the same name as receipt.PublishedAtHeader). An event
// that already carries it keeps its own.
const PublishedAtHeader = "Leafline-Published-At"

// ErrNotStored is wrapped by every error of Publish that leaves events
// not stored.
var ErrNotStored = errors.New("publish: events not stored")

// Config configures New. Zero values mean the defaults stated per field.
type Config struct {
	// JS is the JetStream context of the L1 domain. Required.
	JS jetstream.JetStream
	// Stream is the origin stream that must store the events. Required.
	Stream string
	// Batch is the most events per atomic batch, 1..MaxBatch; zero =
	// DefaultBatch; 1 = one publish per event.
	Batch int
	// Attempts is how often a batch whose answer was lost is sent, at
	// least 1; zero = DefaultAttempts.
	Attempts int
	// Timeout bounds one batch's round trip; zero = DefaultTimeout.
	Timeout time.Duration
	// RetryFor is how long events are sent again while the stream cannot
	// take them for now (see Transient): a node of its cluster down, its
	// leader being elected; or while it is full (see Full) and L1's
	// cleanup makes room. Zero = DefaultRetryFor.
	RetryFor time.Duration
}

// Event is one event to publish.
type Event struct {
	ID      string // event_id; sent as Nats-Msg-Id. Required.
	Subject string // a subject of the origin stream. Required.
	Data    []byte
	Header  nats.Header // extra headers; may be nil
}

// Result is the PubAck of one event.
type Result struct {
	ID        string
	Stream    string
	Seq       uint64 // 0 for a duplicate answered in an atomic batch
	Duplicate bool   // the stream already held an event with this ID
	Batched   bool   // stored by an atomic batch (else by its own publish)
}

// NotStoredError names the events of a Publish that were not PubAck'ed.
type NotStoredError struct {
	IDs []string
	Err error
}

func (e *NotStoredError) Error() string {
	ids := e.IDs
	more := ""
	if len(ids) > 10 {
		ids, more = ids[:10], fmt.Sprintf(" and %d more", len(e.IDs)-10)
	}
	return fmt.Sprintf("publish: %d events not stored (%s%s): %v", len(e.IDs), strings.Join(ids, ", "), more, e.Err)
}

func (e *NotStoredError) Unwrap() []error { return []error{ErrNotStored, e.Err} }

// Publisher publishes events to the origin stream in atomic batches. It is
// safe for concurrent use.
type Publisher struct {
	cfg     Config
	retries atomic.Int64
}

// New validates cfg, fills its defaults and returns a Publisher.
func New(cfg Config) (*Publisher, error) {
	var errs []error
	if cfg.JS == nil {
		errs = append(errs, errors.New("JS: required"))
	}
	if cfg.Stream == "" {
		errs = append(errs, errors.New("Stream: required"))
	}
	if cfg.Batch < 0 || cfg.Batch > MaxBatch {
		errs = append(errs, fmt.Errorf("Batch: must be 0..%d, got %d", MaxBatch, cfg.Batch))
	}
	if cfg.Attempts < 0 || cfg.Timeout < 0 || cfg.RetryFor < 0 {
		errs = append(errs, errors.New("Attempts, Timeout, RetryFor: must not be negative"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("publish: config: %w", errors.Join(errs...))
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.RetryFor == 0 {
		cfg.RetryFor = DefaultRetryFor
	}
	return &Publisher{cfg: cfg}, nil
}

// Retries counts the attempts the publisher made again after a
// transient failure, since it was made.
func (p *Publisher) Retries() int64 { return p.retries.Load() }

// Transient reports whether a publish failed in a way that passes once
// the stream has a leader again: no server answered (no responders: a
// cluster electing the stream's leader, or a node restarting), the
// answer did not come in time, or the servers answered that JetStream
// is not available now. The same error comes back forever for a subject
// no stream takes, so retries are bounded (Config.RetryFor).
func Transient(err error) bool { return jsmsg.Transient(err) }

// Full reports whether the origin stream refused a publish because it is
// at its limits (DiscardNew); see Config.RetryFor.
func Full(err error) bool { return jsmsg.Full(err) }

// Publish publishes evs in order, in atomic batches of at most Config.Batch,
// and returns their results in order. See the package documentation for
// what a nil error means and what a failure reports. An invalid event
// (empty ID or subject) fails the call before anything is sent.
func (p *Publisher) Publish(ctx context.Context, evs []Event) ([]Result, error) {
	for i, ev := range evs {
		if ev.ID == "" || ev.Subject == "" {
			return nil, &NotStoredError{IDs: ids(evs), Err: fmt.Errorf("event %d: ID and Subject are required", i)}
		}
	}
	res := make([]Result, 0, len(evs))
	for start := 0; start < len(evs); start += p.cfg.Batch {
		chunk := evs[start:min(start+p.cfg.Batch, len(evs))]
		got, notStored, err := p.publishChunk(ctx, chunk)
		res = append(res, got...)
		if err != nil {
			notStored = append(notStored, ids(evs[start+len(chunk):])...)
			return res, &NotStoredError{IDs: notStored, Err: err}
		}
	}
	return res, nil
}

// publishChunk publishes one batch. It returns the results of the events
// that were PubAck'ed and, with an error, the IDs of those that were not.
// What a transient failure left not stored is sent again, pausing longer
// each time, for at least Attempts attempts and as long as RetryFor.
func (p *Publisher) publishChunk(ctx context.Context, evs []Event) ([]Result, []string, error) {
	res := make([]Result, len(evs))
	acked := make([]bool, len(evs))
	todo := make([]int, len(evs))
	for i := range todo {
		todo[i] = i
	}
	deadline := time.Now().Add(p.cfg.RetryFor)
	wait := retryWait
	for attempt := 1; ; attempt++ {
		sub := make([]Event, len(todo))
		for j, i := range todo {
			sub[j] = evs[i]
		}
		got, ok, err := p.attempt(ctx, sub)
		left := todo[:0:0]
		for j, i := range todo {
			if ok[j] {
				res[i], acked[i] = got[j], true
			} else {
				left = append(left, i)
			}
		}
		todo = left
		if len(todo) == 0 {
			break
		}
		if ctx.Err() != nil || !(Transient(err) || Full(err)) || (attempt >= p.cfg.Attempts && !time.Now().Before(deadline)) {
			var out []Result
			for i := range evs {
				if acked[i] {
					out = append(out, res[i])
				}
			}
			notStored := make([]string, len(todo))
			for j, i := range todo {
				notStored[j] = evs[i].ID
			}
			return out, notStored, err
		}
		p.retries.Add(1)
		if Full(err) {
			// Room comes back as the cleanup deletes: look again
			// soon, so that the fleet is not left idle.
			ctxsleep.For(ctx, retryWait)
			continue
		}
		ctxsleep.For(ctx, wait)
		wait = min(2*wait, retryWaitMax)
	}
	return res, nil, nil
}

// attempt sends evs once: as one atomic batch, or one by one where a
// batch cannot take them. ok[i] says whether event i was PubAck'ed, with
// its result in res[i]; err is why the others were not.
func (p *Publisher) attempt(ctx context.Context, evs []Event) (res []Result, ok []bool, err error) {
	if len(evs) == 1 || p.cfg.Batch == 1 {
		return p.publishEach(ctx, evs)
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	// One round trip: the commit's answer reports any refusal.
	ack, err := jetstreamext.PublishMsgBatch(cctx, p.cfg.JS, p.msgs(evs), jetstreamext.BatchFlowControl{})
	cancel()
	if err == nil {
		res, ok = make([]Result, len(evs)), make([]bool, len(evs))
		first := ack.Sequence - uint64(len(evs)) + 1
		for i, ev := range evs {
			res[i], ok[i] = Result{ID: ev.ID, Stream: ack.Stream, Seq: first + uint64(i), Batched: true}, true
		}
		return res, ok, nil
	}
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil && !Transient(err) && !Full(err) {
		// Refused whole: some IDs are already stored (a repeat of a
		// batch that landed, or an ID twice), or the stream takes no
		// atomic batches. One by one, each duplicate is PubAck'ed as one.
		return p.publishEach(ctx, evs)
	}
	// No answer, or not now: the caller sends the same batch again.
	return nil, make([]bool, len(evs)), err
}

// publishEach publishes evs one by one, pipelined. ok[i] says whether
// event i was PubAck'ed, with its result in res[i].
func (p *Publisher) publishEach(ctx context.Context, evs []Event) (res []Result, ok []bool, err error) {
	res, ok = make([]Result, len(evs)), make([]bool, len(evs))
	futs := make([]jetstream.PubAckFuture, 0, len(evs))
	for _, m := range p.msgs(evs) {
		f, perr := p.cfg.JS.PublishMsgAsync(m)
		if perr != nil {
			err = perr
			break
		}
		futs = append(futs, f)
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	for i, f := range futs {
		select {
		case ack := <-f.Ok():
			res[i], ok[i] = Result{ID: evs[i].ID, Stream: ack.Stream, Seq: ack.Sequence, Duplicate: ack.Duplicate}, true
		case ferr := <-f.Err():
			err = errors.Join(err, fmt.Errorf("event %s: %w", evs[i].ID, ferr))
		case <-cctx.Done():
			err = errors.Join(err, fmt.Errorf("event %s: no PubAck: %w", evs[i].ID, cctx.Err()))
		}
	}
	return res, ok, err
}

// msgs builds the messages of evs afresh (a batch publish adds its own
// headers to the messages it sends).
func (p *Publisher) msgs(evs []Event) []*nats.Msg {
	out := make([]*nats.Msg, len(evs))
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for i, ev := range evs {
		m := nats.NewMsg(ev.Subject)
		for k, vs := range ev.Header {
			m.Header[k] = append([]string(nil), vs...)
		}
		if m.Header.Get(PublishedAtHeader) == "" {
			m.Header.Set(PublishedAtHeader, now)
		}
		m.Header.Set(jetstream.MsgIDHeader, ev.ID)
		m.Header.Set(expectedStreamHeader, p.cfg.Stream)
		m.Data = ev.Data
		out[i] = m
	}
	return out
}

func ids(evs []Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}
