package hop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/jsmsg"
)

// Headers the relay adds to every message it stores.
const (
	// HeaderLink is the name of the link that stored the message.
	HeaderLink = "Leafline-Relay-Link"
	// HeaderSeq is the message's sequence in the upstream stream.
	HeaderSeq = "Leafline-Relay-Seq"
)

// headerStreamSource is the header the server gives a message it stores by
// stream sourcing: "<source> <upstream sequence> <filter> <destination> <subject>".
const headerStreamSource = "Nats-Stream-Source"

// errDuplicateInBatch is the server's refusal of an atomic batch that holds
// a Nats-Msg-Id already in the stream's duplicate window.
const errDuplicateInBatch jetstream.ErrorCode = 10201

// Link describes one link's relay. The zero value of each optional field
// means its default.
type Link struct {
	// Name identifies the link; it is written in HeaderLink. Required.
	Name string
	// Upstream reaches the upstream site's JetStream through the link
	// (jetstream.NewWithDomain). Required.
	Upstream jetstream.JetStream
	// Stream and Consumer name the upstream stream and the durable pull
	// consumer that the upstream site created for this link: ACK policy
	// all or explicit, and MaxAckPending at most Batch (so that every
	// unACKed message fits in one fetch; see the package doc). Required.
	Stream, Consumer string
	// Local is the downstream site's JetStream and LocalStream the stream
	// the messages are stored in (it must allow atomic publish). Required.
	Local       jetstream.JetStream
	LocalStream string
	// Subject maps an upstream subject to the subject the message is
	// published on downstream. Required.
	Subject func(upstream string) string
	// Marks are downstream stored subjects (wildcards allowed) that hold
	// this link's messages and no other link's; the newest message on them
	// carries the link's high-water mark. Required.
	Marks []string
	// Batch is how many messages one fetch asks for. Zero means 500; at
	// most 1000 (the server's atomic batch limit).
	Batch int
	// Expiry bounds each pull request, and so how long a restored link
	// waits before the next request reaches the upstream, unless LinkUp
	// says it is back. Zero means 2s.
	Expiry time.Duration
	// LinkUp, if set, returns a channel that is closed when the link next
	// comes up (a new leafnode connection): a relay waiting on a pull
	// request, which a cut may have swallowed, then asks again at once.
	LinkUp func() <-chan struct{}
	// IdleExpiry, with LinkUp, bounds the pull requests of a link that
	// has nothing to move: after each step that brought nothing, the
	// next request waits twice as long, from Expiry up to IdleExpiry,
	// and a message that arrives meanwhile still comes at once. An idle
	// link then crosses one request and its expiry per IdleExpiry
	// instead of per Expiry, which is what a metered link pays for when
	// nothing moves. Zero, or no LinkUp (whose wake-up keeps a request
	// lost in a cut from waiting its expiry out), means Expiry.
	IdleExpiry time.Duration
	// BytesPerSecond caps the bytes the relay pulls across the link:
	// the payload and headers of each message it fetches (msgBytes), as
	// a token bucket that holds Window's worth and starts full (see the
	// package doc, # A bandwidth cap). Zero means no cap.
	BytesPerSecond int64
	// Window is what the cap is averaged over: after a quiet spell the
	// relay may move one Window's worth at once. Zero means 1s; at most
	// 1m. Without BytesPerSecond it has no effect.
	Window time.Duration
	// Cap, if set, is a cap this link shares with other links (NewCap),
	// in place of BytesPerSecond and Window; Rank orders the links that
	// share it, 0 the most urgent.
	Cap  *Cap
	Rank int
	// Skip, if set, names the messages another link carries (a priority
	// class's): they are ACKed without being stored. Each comes again
	// after a restart and is skipped again.
	Skip func(upstream string) bool
	// Changed, if set, is called when the relay finds that the upstream
	// stream is not the one its stored messages came from, just after it
	// positioned the consumer to take it again (package doc, # An
	// upstream replaced or rolled back).
	Changed func(UpstreamChange)
	// Stored, if set, is told where the link's newest message stands in
	// the downstream stream: when the relay reads its tip there, and
	// after each store. The trim of that stream keeps it by this
	// (jsplan.Tips), without reading the stream.
	Stored func(Stored)
	// Log receives the relay's log lines (never payloads). Nil discards.
	Log *slog.Logger
}

// Mover moves one link's messages. Create it with New; run it with Run.
type Mover struct {
	l    Link
	mark uint64 // upstream sequence of the newest message stored or skipped
	// stored is the upstream sequence up to which the link's messages are
	// stored downstream, and tip the newest of them (nil when not known:
	// nothing stored, or nothing since the link started again on another
	// upstream history).
	stored uint64
	tip    *tip
	// upstream is the identity of the upstream stream the link follows
	// ("" until known).
	upstream string
	loaded   bool // tip was read from the downstream stream
	// refollow is set when a step saw a first delivery at or below the
	// mark: the upstream may have changed under the link, and the next
	// step checks it (follow) before it takes anything.
	refollow bool
	// noReset is set when the upstream refused a consumer reset: the
	// relay then absorbs redeliveries at or below the mark instead.
	noReset bool
	cons    jetstream.Consumer
	// cumulative is set when cons ACKs by policy all: one ACK of a
	// batch's newest message stands for the whole batch.
	cumulative bool
	// woken is set when LinkUp ended a pull request: the link was cut
	// meanwhile, and the next step repositions the consumer first.
	woken atomic.Bool
	// idle counts the steps in a row that brought nothing (wait).
	idle int
	// found is set once the upstream consumer was found, and cleared when
	// the upstream says it does not exist (Found).
	found atomic.Bool
	prev  *jetstream.MsgMetadata // the newest delivery stored in this run
	// single is set after an atomic batch failed: the next store, after
	// the mark was read again, goes one message at a time, so that a batch
	// the server keeps refusing or answering badly cannot hold the link.
	single bool
	// refused counts the stores refused in a row: Run waits longer after
	// each (storeBackoff), and a store that succeeds resets it.
	refused int
	// cap is Link.Cap, or Link.BytesPerSecond's own; nil without a cap.
	cap *Cap
	// takeAll is set when the consumer has unACKed messages that must
	// come in one fetch (a batch NAKed for a lost delivery): the next
	// fetch is not bounded by the cap's bytes, which would split them,
	// but its bytes are still taken out of the bucket.
	takeAll bool

	// beforeAck, when set (tests), runs after a batch is stored and
	// before it is ACKed; an error stops Run as a crash would.
	beforeAck func() error
}

// New checks l and returns its relay.
func New(l Link) (*Mover, error) {
	var errs []error
	req := func(ok bool, what string) {
		if !ok {
			errs = append(errs, fmt.Errorf("hop: link %q: %s is required", l.Name, what))
		}
	}
	req(l.Name != "", "Name")
	req(l.Upstream != nil, "Upstream")
	req(l.Stream != "" && l.Consumer != "", "Stream and Consumer")
	req(l.Local != nil && l.LocalStream != "", "Local and LocalStream")
	req(l.Subject != nil, "Subject")
	req(len(l.Marks) > 0, "Marks")
	if l.Batch < 0 || l.Batch > 1000 {
		errs = append(errs, fmt.Errorf("hop: link %q: Batch %d is outside 0..1000", l.Name, l.Batch))
	}
	if l.BytesPerSecond < 0 {
		errs = append(errs, fmt.Errorf("hop: link %q: BytesPerSecond %d is negative", l.Name, l.BytesPerSecond))
	}
	if l.Window < 0 || l.Window > maxWindow {
		errs = append(errs, fmt.Errorf("hop: link %q: Window %s is outside 0..%s", l.Name, l.Window, maxWindow))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if l.Batch == 0 {
		l.Batch = 500
	}
	if l.Expiry <= 0 {
		l.Expiry = 2 * time.Second
	}
	if l.Window == 0 {
		l.Window = time.Second
	}
	if l.Log == nil {
		l.Log = slog.New(slog.DiscardHandler)
	}
	r := &Mover{l: l}
	switch {
	case l.Cap != nil:
		r.cap = l.Cap
	case l.BytesPerSecond > 0:
		r.cap = &Cap{b: newBucket(l.BytesPerSecond, l.Window, time.Now()), busy: map[int]bool{}}
	}
	return r, nil
}

// Mark returns the upstream sequence of the newest message the relay
// stored (0 before the first store or the first read of the mark).
func (r *Mover) Mark() uint64 { return r.mark }

// Found reports whether the relay has found its upstream consumer, and
// the upstream has not said since that it does not exist. A link that
// leaves messages to this one (Link.Skip) must skip them only then: the
// upstream that has this link's consumer keeps them for it.
func (r *Mover) Found() bool { return r.found.Load() }

// Run moves messages until ctx ends and returns nil then. A failing step
// (link down, store refused) is logged and retried; it never ACKs a
// message that is not stored. A step that failed because the link is down
// is retried after linkRetryFirst, then less and less often up to
// linkRetry, and at once when LinkUp says the link is back. Another
// failing step waits a second; a store
// that the downstream stream refuses (a full disk, a stream limit) waits
// twice as long as the one refused before it, up to maxStoreBackoff, so
// that a link whose store stays refused costs one fetch and one refused
// store per maxStoreBackoff, not a loop. Under a cap (Link.BytesPerSecond)
// each fetch first waits for the cap's bucket (see the package doc).
func (r *Mover) Run(ctx context.Context) error {
	failing := ""
	down := 0 // steps in a row that found the link down
	for ctx.Err() == nil {
		var up <-chan struct{}
		if r.l.LinkUp != nil {
			up = r.l.LinkUp()
		}
		err := r.step(ctx)
		var crash *crashError
		if errors.As(err, &crash) {
			return crash.err
		}
		if err != nil && ctx.Err() == nil {
			if s := err.Error(); s != failing {
				r.l.Log.Warn("relay step failed; retrying", "link", r.l.Name, "err", err)
				failing = s
			}
			wait := r.retryWait(err)
			if wait != linkRetry {
				ctxsleep.For(ctx, wait)
				continue
			}
			// The link is down: retry soon, then less and less often,
			// and at once when LinkUp says it is back (its
			// subscriptions may take a moment to cross it).
			if wakeOrSleep(ctx, up, min(linkRetryFirst<<min(down, 10), linkRetry)) {
				down = 0
			} else {
				down++
			}
			continue
		}
		failing, down = "", 0
	}
	return nil
}

// A step that found the link down is retried after linkRetryFirst, twice
// as long after each such step in a row, up to linkRetry.
const (
	linkRetryFirst = 10 * time.Millisecond
	linkRetry      = time.Second
)

// wakeOrSleep waits d, until up is closed, or until ctx is done, and
// reports whether up was closed.
func wakeOrSleep(ctx context.Context, up <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-up:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// retryWait is how long Run waits after a step that failed with err.
func (r *Mover) retryWait(err error) time.Duration {
	switch {
	case errors.Is(err, errStoreRefused):
		return storeBackoff(r.refused)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoHeartbeat),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		// Down, or a request lost in a cut: its timeout was the wait.
		return linkRetry
	}
	return time.Second
}

// maxStoreBackoff bounds the wait after a refused store.
const maxStoreBackoff = 10 * time.Second

// errStoreRefused marks a step whose store the downstream stream refused.
var errStoreRefused = errors.New("store refused")

// storeBackoff is the wait after the n-th store refused in a row: 1s, 2s,
// 4s, … up to maxStoreBackoff.
func storeBackoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	return min(time.Second<<min(n-1, 8), maxStoreBackoff)
}

// crashError carries a beforeAck failure out of Run.
type crashError struct{ err error }

func (e *crashError) Error() string { return e.err.Error() }

// step fetches one batch and moves it.
func (r *Mover) step(ctx context.Context) error {
	if !r.loaded {
		t, err := r.loadTip(ctx)
		if err != nil {
			return fmt.Errorf("read mark: %w", err)
		}
		r.tip, r.stored, r.upstream, r.loaded = t, 0, "", true
		at := Stored{}
		if t != nil {
			r.stored, r.upstream, at = t.seq, t.upstream, t.at
		}
		if r.l.Stored != nil {
			r.l.Stored(at)
		}
		r.mark, r.refollow = r.stored, r.cons != nil
	}
	if r.cons == nil {
		cctx, cancel := r.untilLinkUp(ctx, r.l.Expiry)
		c, err := r.l.Upstream.Consumer(cctx, r.l.Stream, r.l.Consumer)
		cancel()
		if err != nil && r.woken.Load() && ctx.Err() == nil {
			// The link came back while the request, perhaps lost in
			// the cut, was waiting: ask again at once.
			return nil
		}
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			r.found.Store(false)
		}
		if err != nil {
			return fmt.Errorf("consumer %s on %s: %w", r.l.Consumer, r.l.Stream, err)
		}
		r.cons = c
		r.found.Store(true)
		r.cumulative = c.CachedInfo().Config.AckPolicy == jetstream.AckAllPolicy
		// A run's start, or the link back after a failure: the upstream
		// may be another one, and deliveries may have been lost in
		// flight.
		r.woken.Store(false)
		r.refollow = true
	}
	if r.woken.Swap(false) || r.refollow {
		if err := r.follow(ctx); err != nil {
			return err
		}
		r.idle = 0
	}
	// Take what is there at once; if nothing is, wait up to Expiry for
	// the first message and then take what followed it: a pull request
	// for a whole batch would wait for the batch to fill. Under a cap,
	// each fetch carries at most what the cap allows (budget), and one
	// that brings nothing may mean a next message larger than that: the
	// wait for the first message takes it whatever its size.
	budget := r.budget(ctx)
	if ctx.Err() != nil {
		return nil
	}
	// An idle link skips the request that would not wait: the waiting
	// one brings a message as soon as there is one.
	var msgs []jetstream.Msg
	var err error
	if r.idle == 0 {
		msgs, err = r.fetch(ctx, r.l.Batch, true, budget)
	}
	if err == nil && len(msgs) == 0 {
		if msgs, err = r.fetch(ctx, 1, false, 0); err == nil && len(msgs) > 0 {
			if left := budget - msgBytes(msgs[0]); budget == 0 || left > 0 {
				more, err2 := r.fetch(ctx, r.l.Batch-1, true, max(left, 0))
				msgs, err = append(msgs, more...), err2
			}
		}
	}
	r.charge(msgs)
	if err != nil && len(msgs) == 0 {
		r.cons, r.idle = nil, 0
		return fmt.Errorf("fetch: %w", err)
	}
	if len(msgs) == 0 {
		r.idle++
		return nil
	}
	r.idle = 0
	return r.move(ctx, msgs)
}

// fetch asks the consumer for up to n messages, without waiting when
// noWait, else for up to Expiry, or until the link comes up again
// (Link.LinkUp): a pull request sent before a cut was lost with it. A
// timeout is not an error. maxBytes, if not 0, bounds a noWait fetch by
// the server's count of the messages' bytes (subject, reply, headers and
// payload: more than msgBytes counts); a next message larger than what
// is left ends it.
func (r *Mover) fetch(ctx context.Context, n int, noWait bool, maxBytes int64) ([]jetstream.Msg, error) {
	var b jetstream.MessageBatch
	var err error
	switch {
	case noWait && maxBytes > 0:
		b, err = r.cons.Fetch(n, jetstream.FetchMaxBytes(int(min(maxBytes, math.MaxInt32))), jetstream.FetchMaxWait(capLinger))
	case noWait:
		b, err = r.cons.FetchNoWait(n)
	default:
		wait := r.wait()
		fctx, cancel := r.untilLinkUp(ctx, wait)
		defer cancel()
		opts := []jetstream.FetchOpt{jetstream.FetchContext(fctx)}
		if wait >= 10*time.Second {
			// The client's own heartbeat for a long request is every 5 s,
			// each a message across the link; LinkUp already ends a
			// request that a cut lost, so two a request do.
			opts = append(opts, jetstream.FetchHeartbeat((wait-2*time.Second)/2))
		}
		b, err = r.cons.Fetch(n, opts...)
	}
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	err = b.Error()
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if ctx.Err() != nil {
			return msgs, ctx.Err()
		}
		err = nil // the wait ended, or the link came back
	}
	if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return msgs, err
	}
	return msgs, nil
}

// wait is how long a pull request waits for a message: Expiry, doubled
// for each step in a row that brought nothing, up to Link.IdleExpiry.
func (r *Mover) wait() time.Duration {
	d := r.l.Expiry
	if r.l.LinkUp == nil || r.l.IdleExpiry <= d {
		return d
	}
	for range min(r.idle, 16) {
		d *= 2
	}
	return min(d, r.l.IdleExpiry)
}

// untilLinkUp returns a context that ends after d, or when the link next
// comes up (Link.LinkUp), which also sets woken: a request sent before a
// cut was lost with it.
func (r *Mover) untilLinkUp(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	lctx, cancel := context.WithTimeout(ctx, d)
	if r.l.LinkUp != nil {
		up := r.l.LinkUp()
		go func() {
			select {
			case <-up:
				r.woken.Store(true)
				cancel()
			case <-lctx.Done():
			}
		}()
	}
	return lctx, cancel
}

type delivery struct {
	m    jetstream.Msg
	meta *jetstream.MsgMetadata
}

// move stores the new messages of a batch, if they continue the link's
// prefix, and ACKs them with the ones already stored.
func (r *Mover) move(ctx context.Context, msgs []jetstream.Msg) error {
	ds := make([]delivery, 0, len(msgs))
	for _, m := range msgs {
		meta, err := m.Metadata()
		if err != nil {
			// Not a JetStream delivery: nothing to store or ACK.
			continue
		}
		ds = append(ds, delivery{m, meta})
	}
	slices.SortFunc(ds, func(a, b delivery) int {
		return cmp.Compare(a.meta.Sequence.Stream, b.meta.Sequence.Stream)
	})
	var old, take []delivery
	chained := r.prev != nil
	prev := r.prev
	for _, d := range ds {
		if d.meta.Sequence.Stream <= r.mark {
			if d.meta.NumDelivered == 1 && !r.noReset {
				// A first delivery of what the consumer was positioned
				// after: the upstream changed under the link since it
				// last looked. Take nothing until it has looked again.
				r.refollow = true
				return nil
			}
			old = append(old, d)
			continue
		}
		chained = chained && follows(prev, d.meta)
		prev = d.meta
		take = append(take, d)
	}
	if len(take) > 0 && !chained {
		whole, err := r.holdsAllPending(ctx, len(ds))
		if err == nil && !whole && r.reposition(ctx) {
			// A delivery before these was lost in flight: store
			// nothing; they come again with it, from the mark on.
			return nil
		}
		if err != nil || !whole {
			// Without a reset, they come again once the lost
			// delivery's AckWait has passed, all in the next fetch.
			r.prev, r.takeAll = nil, true
			nakAll(ds)
			if err == nil {
				ctxsleep.For(ctx, r.l.Expiry/4)
			}
			return err
		}
	}
	store := take
	if r.l.Skip != nil {
		store = slices.DeleteFunc(slices.Clone(take), func(d delivery) bool { return r.l.Skip(d.m.Subject()) })
	}
	if len(take) > 0 && len(store) == 0 {
		r.mark, r.prev = take[len(take)-1].meta.Sequence.Stream, prev
	}
	if len(store) > 0 {
		at, err := r.store(ctx, store)
		if err != nil {
			// The store may have happened: read the mark again first.
			r.loaded, r.prev = false, nil
			r.refused++
			r.ack(old)
			return fmt.Errorf("%w: store %d messages: %w", errStoreRefused, len(store), err)
		}
		r.mark, r.prev, r.refused = take[len(take)-1].meta.Sequence.Stream, prev, 0
		last := store[len(store)-1]
		r.stored = last.meta.Sequence.Stream
		r.tip = &tip{seq: r.stored, upstream: r.upstream, relayed: true,
			id: last.m.Headers().Get(jetstream.MsgIDHeader), data: last.m.Data(), at: at}
		if r.l.Stored != nil {
			r.l.Stored(at)
		}
		if r.beforeAck != nil {
			if err := r.beforeAck(); err != nil {
				return &crashError{err}
			}
		}
	}
	r.ack(append(old, take...))
	return nil
}

// follows reports whether b was delivered right after a, both for the
// first time: the consumer gives new messages in stream order, so no
// message of its filter lies between them.
func follows(a, b *jetstream.MsgMetadata) bool {
	return a != nil && a.NumDelivered == 1 && b.NumDelivered == 1 && b.Sequence.Consumer == a.Sequence.Consumer+1
}

// reposition asks the upstream to reset the consumer to just after the
// mark, and reports whether it did. The consumer then forgets what it has
// delivered and not had ACKed, counts everything up to the mark as ACKed
// (all of it is stored downstream), and delivers again from the mark on:
// a delivery lost in flight (a cut link, a pull request that expired on
// the way) comes at once rather than after the consumer's AckWait, and a
// consumer that is new, or that another transport left behind, starts
// exactly after what the downstream stream holds. An upstream server
// without the consumer reset API, or a link that went down meanwhile,
// refuses it; the relay then works as without it, absorbing redeliveries
// at or below the mark and waiting out lost ones.
func (r *Mover) reposition(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, r.l.Expiry)
	defer cancel()
	// A consumer created to start after its predecessor's ACK floor
	// (a link whose other transport moved it that far) counts what is
	// before its start as taken.
	seq := max(r.mark+1, r.cons.CachedInfo().Config.OptStartSeq)
	now, err := r.reset(cctx, seq)
	if err != nil {
		r.l.Log.Debug("relay: consumer reset refused; waiting for redeliveries instead", "link", r.l.Name, "err", err)
		return false
	}
	// Another upstream stream than the one the link follows: look again
	// before taking anything.
	r.refollow = r.refollow || r.replaced(now)
	r.prev = nil
	return true
}

// holdsAllPending reports whether the n deliveries in hand are every
// message the consumer has delivered and not had ACKed. Then no earlier
// message of the link is missing downstream: each was delivered before
// these (new messages come in stream order) and is either in hand or
// ACKed, and the relay ACKs only what is stored.
func (r *Mover) holdsAllPending(ctx context.Context, n int) (bool, error) {
	info, err := r.cons.Info(ctx)
	if err != nil {
		r.cons = nil
		return false, fmt.Errorf("consumer info: %w", err)
	}
	return info.NumAckPending == n, nil
}

func (r *Mover) store(ctx context.Context, ds []delivery) (Stored, error) {
	out := make([]*nats.Msg, 0, len(ds))
	for _, d := range ds {
		m := nats.NewMsg(r.l.Subject(d.m.Subject()))
		m.Data = d.m.Data()
		m.Header = jsmsg.Replayed(d.m.Headers())
		m.Header.Set(HeaderLink, r.l.Name)
		m.Header.Set(HeaderSeq, strconv.FormatUint(d.meta.Sequence.Stream, 10))
		m.Header.Del(HeaderUpstream)
		out = append(out, m)
	}
	// The message that can become the link's tip carries the upstream
	// stream's identity: the last of an atomic batch, each one stored
	// alone.
	if r.upstream != "" {
		for i, m := range out {
			if i == len(out)-1 || r.single {
				m.Header.Set(HeaderUpstream, r.upstream)
			}
		}
	}
	if r.single || len(out) == 1 {
		// One message is stored whole by a plain publish, without the
		// server's staging of an atomic batch.
		at, err := r.storeEach(ctx, out)
		if err != nil {
			return at, err
		}
		r.single = false
		return at, nil
	}
	// One round trip: the commit's answer reports any refusal.
	ack, err := jetstreamext.PublishMsgBatch(ctx, r.l.Local, out, jetstreamext.BatchFlowControl{})
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errDuplicateInBatch {
		// One of the ids is in the window: store one by one, in order,
		// so the server drops the duplicate and the prefix still holds.
		return r.storeEach(ctx, out)
	}
	if err != nil {
		if ctx.Err() == nil {
			// Nothing or all of the batch is stored. The caller reads the
			// mark again, which tells which; what is not stored comes again
			// and goes one message at a time.
			r.single = true
		}
		return Stored{}, err
	}
	return Stored{Seq: ack.Sequence, Time: time.Now()}, nil
}

// storeEach stores out one message at a time, in order, so that whatever
// stops it leaves a prefix of the link stored, and the mark holds. It
// returns where the newest of them stands (a duplicate the server drops
// answers with its first copy's sequence).
func (r *Mover) storeEach(ctx context.Context, out []*nats.Msg) (Stored, error) {
	var at Stored
	for _, m := range out {
		jsmsg.Unbatch(m) // after a refused batch
		ack, err := r.l.Local.PublishMsg(ctx, m)
		if err != nil {
			return at, err
		}
		at.Seq = max(at.Seq, ack.Sequence)
	}
	at.Time = time.Now()
	return at, nil
}

func nakAll(ds []delivery) {
	for _, d := range ds {
		_ = d.m.Nak()
	}
}

// ack ACKs ds, every one of them at or below the mark. A consumer with
// ACK policy all gets one ACK, of the newest of them: the server then
// drops every message it has delivered at or below it, and each of those
// is stored (the stored messages are a prefix of the link). A lost ACK is
// absorbed: the message comes again and is at or below the mark.
func (r *Mover) ack(ds []delivery) {
	if len(ds) == 0 {
		return
	}
	if r.cumulative {
		newest := slices.MaxFunc(ds, func(a, b delivery) int {
			return cmp.Compare(a.meta.Sequence.Stream, b.meta.Sequence.Stream)
		})
		_ = newest.m.Ack()
		return
	}
	for _, d := range ds {
		_ = d.m.Ack()
	}
}
