package hop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tip is the newest message a link stored downstream: its upstream
// sequence is the link's high-water mark, and its identity says what the
// upstream held there.
type tip struct {
	seq uint64 // the upstream sequence (HeaderSeq, or the sourcing header's)
	// upstream is the identity of the upstream stream it was taken from
	// (HeaderUpstream, or the sourcing header's), "" when it is not known.
	upstream string
	relayed  bool   // stored by the relay, not by stream sourcing
	id       string // its Nats-Msg-Id
	data     []byte
	// at is where it is stored downstream: its sequence and time there.
	at Stored
}

// Stored is where a link's newest message stands in its downstream
// stream (Link.Stored).
type Stored struct {
	Seq  uint64 // 0: the link has stored nothing there
	Time time.Time
}

// same reports whether m, delivered from the upstream, is the message t
// was stored from: the same id and payload.
func (t *tip) same(m jetstream.Msg) bool {
	return m.Headers().Get(jetstream.MsgIDHeader) == t.id && bytes.Equal(m.Data(), t.data)
}

// loadTip reads the link's tip from the downstream stream (nil when the
// link has stored nothing there).
func (r *Mover) loadTip(ctx context.Context) (*tip, error) {
	s, err := r.l.Local.Stream(ctx, r.l.LocalStream)
	if err != nil {
		return nil, err
	}
	return readTip(ctx, s, r.l.Name, r.l.Marks)
}

// ReadMark reads the high-water mark of the link named link from the
// downstream stream s: the upstream sequence of the newest message on the
// link's subjects marks, stored by the relay or by stream sourcing (the
// package doc). byRelay reports whether the relay stored it.
func ReadMark(ctx context.Context, s jetstream.Stream, link string, marks []string) (mark uint64, byRelay bool, err error) {
	t, err := readTip(ctx, s, link, marks)
	if err != nil || t == nil {
		return 0, false, err
	}
	return t.seq, t.relayed, nil
}

// readTip returns the newest message, by downstream sequence, among the
// newest messages on each of marks that the link named link stored. The
// link stores its messages in upstream order, so that is also the one
// with the highest upstream sequence, unless the link started again on
// an upstream that was replaced or rolled back, whose sequences start
// lower.
func readTip(ctx context.Context, s jetstream.Stream, link string, marks []string) (*tip, error) {
	var out *tip
	newest := uint64(0)
	for _, subj := range marks {
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("last message on %s: %w", subj, err)
		}
		t, ok, err := tipOf(m.Header, link)
		if err != nil {
			return nil, fmt.Errorf("message %d on %s: %w", m.Sequence, subj, err)
		}
		if ok && m.Sequence > newest {
			t.id, t.data = m.Header.Get(jetstream.MsgIDHeader), m.Data
			t.at = Stored{Seq: m.Sequence, Time: m.Time}
			out, newest = t, m.Sequence
		}
	}
	return out, nil
}

// tipOf reads, from the headers of a message stored on the subjects of
// the link named link, its upstream sequence and the upstream stream's
// identity: HeaderSeq and HeaderUpstream of one the relay stored
// (relayed), or the fields of the server's Nats-Stream-Source header of
// one that stream sourcing stored while the link used the other transport
// ("<source> <sequence> <filter> <destination> <subject> [<identity>]").
// ok is false for a message that carries neither (published downstream
// directly). The mark counts every message of the link at or below it as
// stored: both transports store a link's messages in upstream order.
func tipOf(h nats.Header, link string) (t *tip, ok bool, err error) {
	if l := h.Get(HeaderLink); l != "" {
		if l != link {
			return nil, false, nil
		}
		seq, err := strconv.ParseUint(h.Get(HeaderSeq), 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("bad %s header: %w", HeaderSeq, err)
		}
		return &tip{seq: seq, upstream: h.Get(HeaderUpstream), relayed: true}, true, nil
	}
	src := h.Get(headerStreamSource)
	if src == "" {
		return nil, false, nil
	}
	// A form this does not know (the server's own, of versions before
	// 2.10) gives no mark: what it holds may then come again, never less.
	f := strings.Fields(src)
	if len(f) < 2 {
		return nil, false, nil
	}
	seq, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return nil, false, nil
	}
	t = &tip{seq: seq}
	if len(f) >= 6 {
		t.upstream = f[5]
	}
	return t, true, nil
}

// SeqOf returns the upstream sequence of a message that the link named
// link stored, by the relay or by stream sourcing, and whether it is one.
func SeqOf(h nats.Header, link string) (uint64, bool) {
	t, ok, err := tipOf(h, link)
	if err != nil || !ok {
		return 0, false
	}
	return t.seq, true
}
