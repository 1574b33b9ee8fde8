package completion

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jsmsg"
)

// ResendMark is the RedriveHeader value of an event sent again by Resend.
const ResendMark = "resend"

// resendBatch bounds the copies Resend publishes at once: one atomic
// batch, one fsync of the origin stream. resendPage is how many pending
// events it reads at once.
const (
	resendBatch = 500
	resendPage  = 200
)

// errDuplicateInBatch is the server's refusal of an atomic batch holding
// a Nats-Msg-Id still in the stream's duplicate window.
const errDuplicateInBatch jetstream.ErrorCode = 10201

// Resend publishes again, to site alone (ServiceConfig.Address), the
// events pending for site whose origin sequence is at most through: what
// a hub released past site's backlog budget (package jsplan's Release),
// which the origin stream still holds. It goes through site's pending
// events in the order they were published, starting after the list
// cursor after, and stops once it has published copies that take about
// maxBytes in a stream (storedSize; one event at least), at an event
// published within the origin stream's duplicate window
// (OriginDuplicates: the stream would drop its copy; the next round
// starts from it again), or at the end of the list (Resent.Done). It
// skips an event whose latest copy from this process reached site after
// through: a release through there did not release that copy, so a new
// release sends only what it released again.
//
// Each copy is the origin message, with RedriveHeader ResendMark, on the
// subject Address gives: only site's hub consumer for site takes it, and
// site's runner hands it to the sink on its own subject. Copies are
// published in atomic batches and PubAck'ed before Resend returns; a
// copy that reaches site twice (a Resend after a restart of this
// process, the edge already holding the event) is absorbed like any
// redelivery.
func (s *Service) Resend(ctx context.Context, site string, through uint64, after string, maxBytes int64) (Resent, error) {
	out := Resent{Next: after}
	if s.cfg.OriginStream == "" || s.address(site, "x") == "" {
		return out, fmt.Errorf("completion: Resend needs ServiceConfig.OriginStream, and Address for site %s", site)
	}
	st := s.State()
	if st == nil {
		return out, record.ErrNotReady
	}
	stream, err := s.cfg.JS.Stream(ctx, s.cfg.OriginStream)
	if err != nil {
		return out, err
	}
	var (
		batch []*nats.Msg
		ids   []string // the events batch copies
	)
	now := time.Now()
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		defer func() { batch, ids = batch[:0], ids[:0] }()
		// The copies land after the stream's last message: a release
		// through an origin sequence below that did not release them.
		info, err := stream.Info(ctx)
		if err != nil {
			return err
		}
		if err := s.publishCopies(ctx, batch); err != nil {
			return err
		}
		for i, m := range batch {
			out.Events++
			out.Bytes += storedSize(m)
			// A copy, not a redrive: it takes nothing of the event's
			// redrives, which may still be owed to another edge.
			s.redrive.copy(ids[i], copyOf{at: now, seq: info.State.LastSeq + 1, site: site})
		}
		return nil
	}
	defer func() { s.resent.Add(uint64(out.Events)) }()
	// Without a redrive, its loop does not forget old copies: Resend
	// does, once a minute at most, not at every round.
	if s.redrive.forgetDue(time.Minute, now) {
		s.redrive.forget(4*s.cfg.RedriveAfter, s.copiesKeep(), now)
	}
	for {
		// Pages of resendPage: a round overshoots maxBytes by one page
		// at most.
		page, cursor, err := st.List(ctx, record.ListQuery{Status: record.ListPending, Site: site, Limit: resendPage, After: out.Next})
		if err != nil {
			return out, err
		}
		young := false
		for i := range page {
			c := &page[i]
			if !c.OriginKnown() || c.OriginSeq == 0 || c.OriginSeq > through {
				continue
			}
			if now.Sub(c.PublishedAt) <= s.cfg.OriginDuplicates {
				// The origin stream would drop a copy as a duplicate;
				// this event and those published after it wait.
				young = true
				break
			}
			if s.redrive.copiedWithin(c.EventID, s.cfg.OriginDuplicates, now) ||
				s.redrive.copiedAfter(c.EventID, site, through) {
				// A copy sent just now is on its way, or one sent after
				// what the hub released is still held for the edge.
				continue
			}
			msgs, err := s.copies(ctx, stream, c, ResendMark, site)
			if err != nil {
				return out, err
			}
			for _, m := range msgs {
				batch, ids = append(batch, m), append(ids, c.EventID)
			}
			if len(batch) >= resendBatch {
				if err := flush(); err != nil {
					return out, err
				}
			}
		}
		if err := flush(); err != nil {
			return out, err
		}
		if young {
			// Next time from this page again: the cursor is a page's.
			return out, nil
		}
		if out.Next = cursor; out.Next == "" {
			out.Done = true
			return out, nil
		}
		if out.Bytes >= maxBytes {
			return out, nil
		}
	}
}

// publishCopies publishes msgs in one atomic batch, one by one when the
// stream refuses the batch for a copy still in its duplicate window (one
// sent before this process started), which the server then drops.
func (s *Service) publishCopies(ctx context.Context, msgs []*nats.Msg) error {
	_, err := jetstreamext.PublishMsgBatch(ctx, s.cfg.JS, msgs)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errDuplicateInBatch {
		return err
	}
	for _, m := range msgs {
		jsmsg.Unbatch(m)
		if _, err := s.cfg.JS.PublishMsg(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// storedSize estimates what a copy takes in a hub's stream, which is
// what a hub's backlog budget counts: its subject, headers and payload,
// and storedOverhead. Small events are mostly headers: counting their
// payload alone would send many times what the budget has room for.
func storedSize(m *nats.Msg) int64 {
	return int64(len(m.Subject) + len(m.Data) + jsmsg.HeaderBytes(m.Header) + storedOverhead)
}

// storedOverhead is what a stream adds to a message: the relay's headers
// (its origin) and the store's framing.
const storedOverhead = 128

// Resent is what one Resend round did.
type Resent struct {
	// Next is the list cursor the next round goes on from; Done is set
	// once the round reached the end of the list.
	Next string
	Done bool
	// Events and Bytes are the copies it published, and about what they
	// take in a stream (storedSize).
	Events int
	Bytes  int64
}
