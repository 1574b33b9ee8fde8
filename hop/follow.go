package hop

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// HeaderUpstream is the identity of the upstream stream a stored message
// was taken from (the server's stream identity, which changes when the
// stream is created again). The relay writes it on the last message of
// each batch it stores, which is the one that can become the link's tip.
const HeaderUpstream = "Leafline-Relay-Upstream"

// headerStreamIdentity asks the server to answer a consumer reset with
// the identity of the consumer's stream, in the same header.
const headerStreamIdentity = "Nats-Stream-Identity"

// Kinds of UpstreamChange.
const (
	// UpstreamReplaced: the upstream stream is another one than the one
	// the link's stored messages came from (created again: a box
	// replaced, its data dir lost).
	UpstreamReplaced = "replaced"
	// UpstreamRolledBack: the upstream stream is the same one but no
	// longer holds what the link stored last at that sequence (its box
	// restored from an older copy of its data dir).
	UpstreamRolledBack = "rolled_back"
	// DownstreamNew: this end of the link has never stored a message
	// while the upstream records that the link took messages (this box
	// replaced with a blank disk): the link takes the upstream after what it
	// recorded as taken, not from the stream's start, and what the old
	// box had taken and not passed on is for the repair upstream of the
	// link (a release, or L1's redrive) to send again.
	DownstreamNew = "new_downstream"
)

// UpstreamChange is what a relay found when its upstream stream was not
// the one its stored messages came from, or when it holds nothing of an
// upstream that records what it took (Link.Changed).
type UpstreamChange struct {
	Kind string // UpstreamReplaced, UpstreamRolledBack or DownstreamNew
	// Was and Now are the upstream stream's identities, as stored with
	// the link's tip and as the upstream reports it ("" when unknown).
	Was, Now string
	// Mark is the upstream sequence the link had stored up to; Start the
	// upstream sequence it takes again from.
	Mark, Start uint64
}

// follow checks that the upstream stream is the incarnation that the
// link's tip came from, and still holds the tip at its sequence, and then
// positions the consumer just after what the link holds (package doc,
// # An upstream replaced or rolled back). It forgets the messages skipped
// since the tip (Link.Skip): they come again and are skipped again.
//
// It costs the consumer's info, one or two consumer resets and, when the
// upstream has not recorded the link's ACK of the tip, a fetch of the tip.
func (r *Mover) follow(ctx context.Context) error {
	err := r.check(ctx)
	if errors.Is(err, errNoReset) {
		// An upstream without the consumer reset: the relay absorbs
		// what comes again at or below the mark, as it can.
		r.l.Log.Debug("relay: consumer reset refused; the upstream's history is not checked", "link", r.l.Name, "err", err)
		r.noReset, r.refollow = true, false
		return nil
	}
	// Until it has looked, the link takes nothing.
	r.noReset, r.refollow = false, err != nil
	return err
}

// check is follow's work.
func (r *Mover) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.l.Expiry)
	defer cancel()
	info, err := r.cons.Info(ctx)
	if err != nil {
		r.cons = nil
		return fmt.Errorf("consumer info: %w", err)
	}
	floor, first := info.AckFloor.Stream, max(info.Config.OptStartSeq, 1)
	r.mark, r.prev = r.stored, nil
	t := r.tip
	if t == nil || t.seq <= floor {
		// Nothing to check the upstream's history against (nothing
		// stored, or the upstream has since recorded the link's ACK of
		// the tip: it trims only what every taker has ACKed).
		start := max(r.stored+1, first)
		fresh := t == nil && r.stored == 0 && floor > 0
		if fresh {
			// This end holds nothing of the link, and the upstream
			// recorded that it took up to floor: a new box in place
			// of one that did (a blank disk).
			start = max(floor+1, first)
			r.stored, r.mark = start-1, start-1
		}
		now, err := r.reset(ctx, start)
		if err != nil {
			return err
		}
		if r.replaced(now) {
			return r.restart(ctx, UpstreamChange{Kind: UpstreamReplaced, Was: r.upstream, Now: now, Mark: r.stored, Start: first})
		}
		r.upstream = cmp.Or(now, r.upstream)
		if fresh && r.l.Skip == nil && r.l.Changed != nil && r.blank(ctx) {
			// A link that skips another's messages may have stored
			// none of its own, and a stream that once held messages
			// may have had the link's tip trimmed (jsplan.TipKeep):
			// neither is a new box.
			r.l.Changed(UpstreamChange{Kind: DownstreamNew, Now: now, Start: start})
		}
		return nil
	}
	now, err := r.reset(ctx, t.seq)
	if err != nil {
		return err
	}
	if r.replaced(now) {
		return r.restart(ctx, UpstreamChange{Kind: UpstreamReplaced, Was: r.upstream, Now: now, Mark: t.seq, Start: first})
	}
	msgs, err := r.fetch(ctx, 1, true, 0)
	r.charge(msgs)
	if err != nil {
		r.cons = nil
		return fmt.Errorf("fetch the tip: %w", err)
	}
	if len(msgs) == 1 && t.same(msgs[0]) {
		if meta, err := msgs[0].Metadata(); err == nil && meta.Sequence.Stream == t.seq {
			// The upstream holds what the link stored last: ACKing it
			// positions the consumer after it.
			r.upstream = cmp.Or(now, r.upstream)
			return msgs[0].Ack()
		}
	}
	// The upstream has not recorded the ACK of the tip and does not hold
	// it: its history forked after its ACK floor, which is where its
	// history and the link's last agree.
	return r.restart(ctx, UpstreamChange{Kind: UpstreamRolledBack, Was: r.upstream, Now: now, Mark: t.seq, Start: floor + 1})
}

// blank reports whether the downstream stream has never stored a
// message (false when that cannot be read).
func (r *Mover) blank(ctx context.Context) bool {
	s, err := r.l.Local.Stream(ctx, r.l.LocalStream)
	return err == nil && s.CachedInfo().State.LastSeq == 0
}

// replaced reports whether now, the upstream stream's identity, is
// another than the one the link's stored messages came from.
func (r *Mover) replaced(now string) bool {
	return now != "" && r.upstream != "" && now != r.upstream
}

// restart takes the link up again from c.Start on the upstream, which is
// not the history its tip came from: everything there from c.Start on is
// stored again, including what the link had stored before the fork (a
// repeat, which every taker absorbs), and nothing is skipped.
func (r *Mover) restart(ctx context.Context, c UpstreamChange) error {
	r.l.Log.Warn("relay: the upstream stream is not the one this link's messages came from; taking it again from an earlier sequence",
		"link", r.l.Name, "change", c.Kind, "was_stream", cmp.Or(c.Was, "unknown"), "now_stream", cmp.Or(c.Now, "unknown"),
		"mark", c.Mark, "start", c.Start)
	if _, err := r.reset(ctx, c.Start); err != nil {
		return err
	}
	r.tip, r.stored, r.mark, r.upstream = nil, c.Start-1, c.Start-1, c.Now
	if r.l.Changed != nil {
		r.l.Changed(c)
	}
	return nil
}

// reset resets the upstream consumer to deliver again from seq on, and
// returns the upstream stream's identity ("" from a server that does not
// give it). A reset the upstream refuses (a server without the consumer
// reset API) returns errNoReset.
func (r *Mover) reset(ctx context.Context, seq uint64) (string, error) {
	js := r.l.Upstream
	body, err := json.Marshal(map[string]uint64{"seq": seq})
	if err != nil {
		return "", err
	}
	m := nats.NewMsg(apiPrefix(js) + "CONSUMER.RESET." + r.l.Stream + "." + r.l.Consumer)
	m.Data = body
	m.Header.Set(headerStreamIdentity, cmp.Or(r.upstream, "unknown"))
	resp, err := js.Conn().RequestMsgWithContext(ctx, m)
	if err != nil {
		return "", fmt.Errorf("reset consumer %s to %d: %w", r.l.Consumer, seq, err)
	}
	var out struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &out); err != nil {
		return "", fmt.Errorf("reset consumer %s: answer: %w", r.l.Consumer, err)
	}
	if out.Error != nil {
		return "", fmt.Errorf("%w: %w", errNoReset, out.Error)
	}
	return resp.Header.Get(headerStreamIdentity), nil
}

// errNoReset is an upstream's refusal of a consumer reset.
var errNoReset = errors.New("consumer reset refused")

// apiPrefix is the JetStream API prefix of js, with its trailing dot.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}
