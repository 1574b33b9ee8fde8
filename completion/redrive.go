package completion

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jsmsg"
	"github.com/leafline/leafline/receipt"
)

// The redrive is the end-to-end repair of the event and receipt paths.
// Every hop between L1 and an edge is a JetStream source whose own
// bookkeeping decides what was delivered; if a hop skips a message (the
// chaos runs saw nats-server v2.15.2's durable sourcing do so after a
// source consumer reset, which v2.15.3 fixed), nothing below L1 can
// notice. L1 can: the event stays pending for that processor.
//
// So every RedriveAfter/4 the service lists the overdue events and
// redrives each one that is
//
//   - pending at least RedriveAfter since it was published and since its
//     last redrive, redriven fewer than maxRedrives times by this process;
//   - missing a processor that has reported a LATER event (a higher
//     origin sequence), and any receipt at all within RedriveAfter: the
//     hops deliver in order, so the path has moved past this event — it
//     was skipped, or lost with a box replaced or rolled back, or its
//     receipt was lost — and the processor is alive. An event that is
//     only queued behind a cut link or a backlog is not redriven. (A
//     processor working through copies of older events, after its hub
//     released it or was replaced, reports only lower sequences than its
//     highest: it is alive all the same.) An event a copy was sent for
//     within RedriveAfter waits for that copy.
//
// A redrive copies the origin message (same subject, payload, headers and
// Nats-Msg-Id) and publishes the copy on the origin stream with
// RedriveHeader, waiting for its PubAck. The copy travels the whole path
// again: a processor that never got the event processes it, one that did
// re-sends its receipt, and L1 absorbs every duplicate by (event_id,
// processor). Nothing is ever deleted. (An event an edge keeps failing
// without a DLQ is pending too; maxRedrives per 4×RedriveAfter bounds
// what it costs.)
//
// The redrive state is in memory: after an L1 restart an overdue event may
// be redriven again, which only costs a duplicate.
type redriver struct {
	mu       sync.Mutex
	seen     map[string]progress  // processor -> its latest reported event
	redriven map[string]time.Time // event_id -> last redrive
	count    map[string]int
	// copied is this process's latest copy of each event (a redrive or
	// a resend): the origin stream drops another within its duplicate
	// window (same Nats-Msg-Id), so none is sent then; and a hub release
	// through an origin sequence below the copy's did not release it.
	copied map[string]copyOf
	// forgot is when Resend last had the old copies forgotten.
	forgot time.Time
}

// copyOf is one copy of an event on the origin stream: when it was
// published, the lowest origin sequence it can have, and the site it was
// addressed to ("" when it went on the event's own subject, to every
// edge the subject matches).
type copyOf struct {
	at   time.Time
	seq  uint64
	site string
}

// progress is the highest origin sequence a processor reported, and when
// it last reported anything.
type progress struct {
	seq  uint64
	last time.Time
}

// maxRedrives bounds the redrives of one event by one process.
const maxRedrives = 3

func (r *redriver) sawReceipt(processor string, originSeq uint64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]progress{}
	}
	p := r.seen[processor]
	r.seen[processor] = progress{seq: max(p.seq, originSeq), last: now}
}

// due reports whether c should be redriven now, and its redrive number.
func (r *redriver) due(c *record.Completion, after time.Duration, now time.Time) (int, bool) {
	if !c.OriginKnown() || c.OriginSeq == 0 || now.Sub(c.PublishedAt) < after {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.redriven[c.EventID]; ok && now.Sub(t) < after {
		return 0, false
	}
	if r.count[c.EventID] >= maxRedrives {
		return 0, false
	}
	for _, p := range c.Missing {
		if pr, ok := r.seen[p]; ok && pr.seq > c.OriginSeq && now.Sub(pr.last) < after {
			return r.count[c.EventID] + 1, true
		}
	}
	return 0, false
}

func (r *redriver) done(id string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.redriven == nil {
		r.redriven, r.count = map[string]time.Time{}, map[string]int{}
	}
	r.redriven[id] = now
	r.count[id]++
}

// copy records c, the latest copy of the event id.
func (r *redriver) copy(id string, c copyOf) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.copied == nil {
		r.copied = map[string]copyOf{}
	}
	r.copied[id] = c
}

// copiedWithin reports whether a copy of the event id was published less
// than d before now.
func (r *redriver) copiedWithin(id string, d time.Duration, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.copied[id]
	return ok && now.Sub(c.at) <= d
}

// forgetDue reports whether the last forgetDue that returned true was at
// least every ago, and if so takes now as its time.
func (r *redriver) forgetDue(every time.Duration, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.forgot) < every {
		return false
	}
	r.forgot = now
	return true
}

// copiedAfter reports whether the latest copy of the event id reached
// site at an origin sequence above through: a hub's release through
// there did not release it.
func (r *redriver) copiedAfter(id, site string, through uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.copied[id]
	return ok && c.seq > through && (c.site == "" || c.site == site)
}

// forget drops the redrive state of events last redriven more than keep
// ago (an event is redriven at most maxRedrives times per keep), and the
// copies published more than copies ago.
func (r *redriver) forget(keep, copies time.Duration, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, t := range r.redriven {
		if now.Sub(t) > keep {
			delete(r.redriven, id)
			delete(r.count, id)
		}
	}
	for id, c := range r.copied {
		if now.Sub(c.at) > copies {
			delete(r.copied, id)
		}
	}
}

// redriveLoop runs redrive rounds until ctx is done.
func (s *Service) redriveLoop(ctx context.Context) {
	every := s.cfg.RedriveAfter / 4
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.RedriveOnce(ctx, time.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("receipts: redrive round failed", "err", err, "redriven", n)
		case n > 0:
			s.log.Warn("receipts: redrove overdue events (published again on the origin stream): a hop lost them or their receipts", "events", n)
		}
		s.redrive.forget(4*s.cfg.RedriveAfter, s.copiesKeep(), time.Now())
	}
}

// RedriveOnce runs one redrive round as of now and returns how many events
// it published again.
func (s *Service) RedriveOnce(ctx context.Context, now time.Time) (int, error) {
	st := s.State()
	if st == nil {
		return 0, record.ErrNotReady
	}
	stream, err := s.cfg.JS.Stream(ctx, s.cfg.OriginStream)
	if err != nil {
		return 0, err
	}
	n, after := 0, ""
	for n < s.cfg.RedriveMax {
		page, next, err := st.List(ctx, record.ListQuery{Status: record.ListOverdue, Limit: min(record.MaxListLimit, s.cfg.RedriveMax), After: after})
		if err != nil {
			return n, err
		}
		for i := range page {
			c := &page[i]
			num, ok := s.redrive.due(c, s.cfg.RedriveAfter, now)
			if !ok || s.redrive.copiedWithin(c.EventID, max(s.cfg.OriginDuplicates, s.cfg.RedriveAfter), now) {
				continue // a copy is on its way: it has its time too
			}
			cp, err := s.redriveOne(ctx, stream, c, num)
			if err != nil {
				return n, err
			}
			cp.at = now
			s.redrive.done(c.EventID, now)
			s.redrive.copy(c.EventID, cp)
			s.redriven.Add(1)
			if n++; n >= s.cfg.RedriveMax {
				break
			}
		}
		if next == "" {
			return n, nil
		}
		after = next
	}
	return n, nil
}

// redriveOne publishes a copy of c's origin message with RedriveHeader:
// to the one processor missing it when Address addresses it, else on its
// subject, to every edge it matches. One copy: a second one of the same
// event would be a duplicate for the origin stream. It returns the copy
// it published (zero when the origin message is gone).
func (s *Service) redriveOne(ctx context.Context, stream jetstream.Stream, c *record.Completion, num int) (copyOf, error) {
	to := ""
	if len(c.Missing) == 1 && s.address(c.Missing[0], c.Subject) != "" {
		to = c.Missing[0]
	}
	msgs, err := s.copies(ctx, stream, c, strconv.Itoa(num), to)
	cp := copyOf{site: to}
	for _, m := range msgs {
		ack, err := s.cfg.JS.PublishMsg(ctx, m)
		if err != nil {
			return cp, err
		}
		cp.seq = ack.Sequence
	}
	return cp, err
}

// copiesKeep is how long the service remembers a copy it published: past
// the origin stream's duplicate window, while its edge may still be
// released again as it catches up. A copy forgotten is sent again at the
// edge's next release, which costs only a duplicate.
func (s *Service) copiesKeep() time.Duration {
	return max(s.cfg.OriginDuplicates, 4*s.cfg.RedriveAfter, minCopiesKeep)
}

// minCopiesKeep is the shortest copiesKeep.
const minCopiesKeep = 15 * time.Minute

// address is the subject of a copy of an event of subject to site alone,
// or "" when Address does not address it.
func (s *Service) address(site, subject string) string {
	if s.cfg.Address == nil || site == "" {
		return ""
	}
	return s.cfg.Address(site, subject)
}

// copies returns copies of c's origin message with RedriveHeader set to
// mark, one addressed to each site of to ("" for the origin subject),
// without the headers of the publish that stored it (jsmsg.Replayed). It
// returns none, and no error, for an event whose origin message is gone
// from the origin stream or is another event.
func (s *Service) copies(ctx context.Context, stream jetstream.Stream, c *record.Completion, mark string, to ...string) ([]*nats.Msg, error) {
	raw, err := stream.GetMsg(ctx, c.OriginSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// Gone from the origin stream (limits): nothing to send again.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The copy is the same event: it must carry the same event_id.
	id, err := s.originEventID(jsmsg.Stored(raw))
	if err != nil || id != c.EventID {
		s.log.Warn("receipts: not sending again: the origin message at the recorded sequence is another event",
			"stream", s.cfg.OriginStream, "seq", c.OriginSeq, "event_id", receipt.ShortQuote(c.EventID))
		return nil, nil
	}
	var out []*nats.Msg
	for _, site := range to {
		subject := raw.Subject
		if site != "" {
			subject = s.address(site, raw.Subject)
		}
		m := nats.NewMsg(subject)
		m.Data = raw.Data
		m.Header = jsmsg.Replayed(raw.Header)
		m.Header.Set(receipt.RedriveHeader, mark)
		out = append(out, m)
	}
	return out, nil
}
