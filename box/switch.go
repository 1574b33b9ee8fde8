package box

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/hop"
	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// A link's transport (topology sites[].transport) can be switched between
// stream sourcing and the relay on a running system, in either direction,
// by restarting both ends with the new topology, in any order. The new
// transport starts exactly after what the old one stored downstream: no
// message is stored twice, none is skipped, also when a box crashes during
// the switch. The downstream stream's newest message on the link's
// subjects says how far the link got (its mark: package hop), whichever
// transport stored it. The trim keeps it while it is the stream's last
// message or younger than jsplan.TipKeep; past that, the upstream has
// long recorded the ACK of it, and its consumer's ACK floor holds the
// same place.
//
//   - The upstream end creates the new transport's consumer, starting after
//     the old consumer's ACK floor when that one exists, and then deletes
//     the old one (jsplan.Reconcile). The ACK floor alone may be short of
//     what is stored: a batch stored and not yet ACKed at a crash.
//   - Sourcing to relay: the relay reads its mark from the sourced
//     messages' headers and resets its consumer to just after it before it
//     takes anything (hop.Mover).
//   - Relay to sourcing: the server's durable source starts at its
//     consumer's ACK floor. So the box adds the source to its stream only
//     after resetting the upstream's source consumer to just after the
//     relay's mark (holdSwitchedSources, positionSources). While that
//     cannot be done (the link down, the upstream not switched yet) the
//     stream goes without the source, and the box tries again every
//     switchRetry.

// switchRetry is how often a box tries again to position a source
// consumer after a switch from the relay.
const switchRetry = 2 * time.Second

// heldSource is a source that the jsplan.Plan gives a stream and that waits for
// its upstream consumer to be positioned after the relay's mark.
type heldSource struct {
	link jsplan.TakenLink
	src  *jetstream.StreamSource
	mark uint64
}

// holdSwitchedSources takes out of p the sources of the links that moved
// from the relay to sourcing and whose stream does not have them yet, and
// returns them with the relay's mark.
func holdSwitchedSources(ctx context.Context, js jetstream.JetStream, cfg *topology.Config, site *topology.Site, p *jsplan.Plan) ([]heldSource, error) {
	var held []heldSource
	for _, sp := range jsplan.TakenLinks(cfg, site) {
		if sp.Relay {
			continue
		}
		i := slices.IndexFunc(p.Streams, func(c jetstream.StreamConfig) bool { return c.Name == sp.LocalStream })
		if i < 0 {
			continue
		}
		want := &p.Streams[i]
		k := slices.IndexFunc(want.Sources, sp.IsSource)
		if k < 0 {
			continue
		}
		s, err := js.Stream(ctx, sp.LocalStream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", sp.LocalStream, err)
		}
		if slices.ContainsFunc(s.CachedInfo().Config.Sources, sp.IsSource) {
			continue
		}
		mark, byRelay, err := hop.ReadMark(ctx, s, sp.LinkName(site), sp.Marks)
		if err != nil {
			return nil, fmt.Errorf("stream %s: the mark of link %s: %w", sp.LocalStream, sp.LinkName(site), err)
		}
		if !byRelay {
			continue
		}
		held = append(held, heldSource{link: sp, src: want.Sources[k], mark: mark})
		want.Sources = slices.Delete(slices.Clone(want.Sources), k, k+1)
	}
	return held, nil
}

// positionSources positions each held source's upstream consumer and then
// adds the source to its stream, trying again every switchRetry until all
// are done or ctx ends.
func (a *App) positionSources(ctx context.Context, held []heldSource) {
	failed := map[string]string{}
	for len(held) > 0 && ctx.Err() == nil {
		left := held[:0]
		for _, h := range held {
			name := h.link.LinkName(a.site)
			if err := a.positionSource(ctx, h); err != nil {
				if failed[name] != err.Error() {
					a.log.Warn("link switched to sourcing: its source waits for the upstream; retrying",
						"link", name, "stream", h.link.LocalStream, "err", err)
					failed[name] = err.Error()
				}
				left = append(left, h)
				continue
			}
			a.log.Info("link switched to sourcing: source added after the relay's mark",
				"link", name, "stream", h.link.LocalStream, "mark", h.mark)
		}
		if held = left; len(held) > 0 {
			ctxsleep.For(ctx, switchRetry)
		}
	}
}

// resetSourceConsumer resets the source consumer cons on stream in the
// JetStream domain domain, across the link, to seq. The link carries the
// answer only on the subjects the server's own source uses for its
// replies ($JSC.R.<domain>.*.<stream>.<consumer>.*: linkperm.Permissions),
// so the request is sent with such a reply subject rather than an inbox.
func resetSourceConsumer(ctx context.Context, nc *nats.Conn, domain, stream, cons string, seq uint64) error {
	token := strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
	reply := "$JSC.R." + domain + ".leafline." + stream + "." + cons + "." + token
	sub, err := nc.SubscribeSync(reply)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	// The interest travels ahead of the request on the leafnode link.
	if err := nc.FlushWithContext(ctx); err != nil {
		return err
	}
	body, err := json.Marshal(map[string]uint64{"seq": seq})
	if err != nil {
		return err
	}
	subj := topology.APIPrefix(domain) + ".CONSUMER.RESET." + stream + "." + cons
	if err := nc.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Data: body}); err != nil {
		return err
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return err
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	return nil
}

// positionSource resets the upstream's source consumer of h to just after
// the relay's mark, then adds h's source to its stream. A crash in
// between leaves the stream without the source: the next start holds it
// again, at the same mark.
func (a *App) positionSource(ctx context.Context, h heldSource) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons := topology.SourceConsumerName(a.site.Name)
	if err := resetSourceConsumer(ctx, a.nc, h.link.From.Domain, h.link.Stream, cons, h.mark+1); err != nil {
		return fmt.Errorf("reset consumer %s on %s at %s to %d: %w", cons, h.link.Stream, h.link.From.Name, h.mark+1, err)
	}
	s, err := a.js.Stream(ctx, h.link.LocalStream)
	if err != nil {
		return err
	}
	c := s.CachedInfo().Config
	if !slices.ContainsFunc(c.Sources, h.link.IsSource) {
		c.Sources = append(c.Sources, h.src)
	}
	if _, err := a.js.UpdateStream(ctx, c); err != nil {
		return fmt.Errorf("add source %s to stream %s: %w", h.src.Name, h.link.LocalStream, err)
	}
	return nil
}
