package hop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// loadMark reads the link's high-water mark from the downstream stream.
func (r *Mover) loadMark(ctx context.Context) (uint64, error) {
	s, err := r.l.Local.Stream(ctx, r.l.LocalStream)
	if err != nil {
		return 0, err
	}
	mark, _, err := ReadMark(ctx, s, r.l.Name, r.l.Marks)
	return mark, err
}

// ReadMark reads the high-water mark of the link named link from the
// downstream stream s: the highest upstream sequence among the newest
// messages on the link's subjects marks, stored by the relay or by stream
// sourcing (the package doc). byRelay reports whether one of those
// newest messages was stored by the relay.
func ReadMark(ctx context.Context, s jetstream.Stream, link string, marks []string) (mark uint64, byRelay bool, err error) {
	for _, subj := range marks {
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("last message on %s: %w", subj, err)
		}
		seq, relayed, ok, err := markOf(m.Header, link)
		if err != nil {
			return 0, false, fmt.Errorf("message %d on %s: %w", m.Sequence, subj, err)
		}
		if ok {
			mark, byRelay = max(mark, seq), byRelay || relayed
		}
	}
	return mark, byRelay, nil
}

// markOf returns the upstream sequence of a message stored on the
// subjects of the link named link: HeaderSeq of one the relay stored
// (relayed), or the sequence in the
// server's Nats-Stream-Source header of one that stream sourcing stored
// while the link used the other transport (its second field). ok is false
// for a message that carries neither (published downstream directly).
// The mark counts every message of the link at or below it as stored:
// both transports store a link's messages in upstream order.
func markOf(h nats.Header, link string) (seq uint64, relayed, ok bool, err error) {
	if l := h.Get(HeaderLink); l != "" {
		if l != link {
			return 0, false, false, nil
		}
		seq, err := strconv.ParseUint(h.Get(HeaderSeq), 10, 64)
		if err != nil {
			return 0, false, false, fmt.Errorf("bad %s header: %w", HeaderSeq, err)
		}
		return seq, true, true, nil
	}
	src := h.Get(headerStreamSource)
	if src == "" {
		return 0, false, false, nil
	}
	// A form this does not know (the server's own, of versions before
	// 2.10) gives no mark: what it holds may then come again, never less.
	f := strings.Fields(src)
	if len(f) < 2 {
		return 0, false, false, nil
	}
	seq, err = strconv.ParseUint(f[1], 10, 64)
	return seq, false, err == nil, nil
}
