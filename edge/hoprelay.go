package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/leafline/leafline/hop"
	"github.com/leafline/leafline/topology"
)

// relayBatch is how many messages a relay link moves per fetch, and so
// per atomic batch and fsync; it is also its consumer's MaxAckPending
// (package hop requires at most one fetch of unACKed messages).
const relayBatch = 1000

// relayAckWait bounds how long a delivery lost in flight holds a relay
// link back: it comes again after this.
const relayAckWait = 5 * time.Second

// lowerEnd returns the downstream end of the link between site and other
// (one is the other's upstream): the site whose setting chooses the
// link's transport.
func lowerEnd(site, other *topology.Site) *topology.Site {
	if other.Name == site.Upstream {
		return site
	}
	return other
}

// relayed reports whether the link between site and other uses the relay.
func relayed(t *topology.Topology, site, other *topology.Site) bool {
	return t.LinkTransport(lowerEnd(site, other)) == topology.TransportRelay
}

// takerName is the durable consumer that site creates on one of its
// streams for down, the downstream end of a link that takes the stream.
func takerName(t *topology.Topology, site, down *topology.Site) string {
	if relayed(t, site, down) {
		return topology.RelayConsumerName(down.Name)
	}
	return topology.SourceConsumerName(down.Name)
}

// relayConsumerConfig is the durable pull consumer that a relay link's
// downstream site pulls through the link. Its ACK policy is all: the relay
// ACKs a batch with one message instead of one per message, which halves
// the messages crossing the link. A consumer created with explicit ACKs
// keeps them (reconcile; the server cannot change a policy in place), and
// the relay ACKs it message by message.
func relayConsumerConfig(down *topology.Site, filter string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:         topology.RelayConsumerName(down.Name),
		Description:     "leafline relay for " + down.Name,
		DeliverPolicy:   jetstream.DeliverAllPolicy,
		AckPolicy:       jetstream.AckAllPolicy,
		AckWait:         relayAckWait,
		MaxAckPending:   relayBatch,
		MaxRequestBatch: relayBatch,
		MaxDeliver:      -1,
		FilterSubject:   filter,
	}
}

// relayDuplicates is the Nats-Msg-Id window of a stream that relay links
// fill: the server's least. The relay needs none (its mark absorbs every
// redelivery), and a copy that L1 publishes again on purpose (a redrive,
// with the same id) must pass as it passes sourcing, which keeps no
// window at all; a stream without sources would get the server's 2m.
const relayDuplicates = 100 * time.Millisecond

// relayInto lets site's relay publish into c: its ingest subjects, mapped
// back to each message's own subject, in atomic batches.
func relayInto(c *jetstream.StreamConfig, site *topology.Site) {
	if c.Duplicates == 0 {
		c.Duplicates = relayDuplicates
	}
	in := topology.RelayIngest(site.Name, c.Name) + ".>"
	if !slices.Contains(c.Subjects, in) {
		c.Subjects = append(c.Subjects, in)
	}
	c.SubjectTransform = &jetstream.SubjectTransformConfig{Source: in, Destination: ">"}
	c.AllowAtomicPublish = true
}

// relaySpec is one link on which a site is the taker (the downstream end):
// by the relay, which the site runs, or by stream sourcing.
type relaySpec struct {
	from        *topology.Site // the upstream end's site
	stream      string         // the stream taken, at from
	localStream string         // the stream filled, at this site
	subject     func(string) string
	marks       []string // subjects of localStream that hold only this link's messages
	relay       bool     // the link's transport is the relay
}

// linkName is the name of the relay of sp at site (hop.Link.Name, and the
// hop.HeaderLink of what it stores).
func (sp relaySpec) linkName(site *topology.Site) string {
	return sp.from.Name + "-" + sp.stream + "-" + site.Name
}

// relaySpecs lists the relay links that site runs: one per link of its
// own whose transport is relay and on which it is the taker.
func relaySpecs(cfg *topology.Config, site *topology.Site) []relaySpec {
	var out []relaySpec
	for _, sp := range takenLinks(cfg, site) {
		if sp.relay {
			out = append(out, sp)
		}
	}
	return out
}

// takenLinks lists the links on which site is the taker, by either
// transport.
func takenLinks(cfg *topology.Config, site *topology.Site) []relaySpec {
	t := cfg.Topology
	ev, rc := t.Events, t.Receipts
	ingest := func(local string) func(string) string {
		p := topology.RelayIngest(site.Name, local) + "."
		return func(s string) string { return p + s }
	}
	var out []relaySpec
	up, _ := t.Site(site.Upstream)
	switch site.Role {
	case topology.RoleL1:
		for _, hub := range t.Downstream(site.Name) {
			var marks []string
			for _, e := range t.Downstream(hub.Name) {
				marks = append(marks, t.ReceiptFilter(e.Name))
			}
			out = append(out, relaySpec{hub, rc.HubStream, rc.L1Stream, ingest(rc.L1Stream), marks, relayed(t, site, hub)})
		}
	case topology.RoleHub:
		out = append(out, relaySpec{up, ev.OriginStream, ev.HubStream, ingest(ev.HubStream), []string{">"}, relayed(t, site, up)})
		for _, e := range t.Downstream(site.Name) {
			// The edge's link carries only its own receipts
			// (topology.ReceiptBinding): the site token is rewritten.
			in, prefix := ingest(rc.HubStream), rc.SubjectPrefix+"."
			bind := func(s string) string {
				rest, ok := strings.CutPrefix(s, prefix)
				if _, status, found := strings.Cut(rest, "."); ok && found {
					s = prefix + e.Name + "." + status
				}
				return in(s)
			}
			out = append(out, relaySpec{e, rc.EdgeStream, rc.HubStream, bind, []string{t.ReceiptFilter(e.Name)}, relayed(t, site, e)})
		}
	case topology.RoleEdge:
		if !site.Direct() {
			out = append(out, relaySpec{up, ev.HubStream, ev.EdgeStream, ingest(ev.EdgeStream), []string{">"}, relayed(t, site, up)})
		}
	}
	return out
}

// startHopRelays runs the site's relay links in g, on a connection of
// their own whose inbox prefix is the only one the links let back.
func (a *App) startHopRelays(ctx context.Context, g *errgroup.Group) error {
	specs := relaySpecs(a.cfg, a.site)
	if len(specs) == 0 {
		return nil
	}
	nc, err := nats.Connect("", nats.InProcessServer(a.srv),
		nats.Name("leafline-"+a.site.Name+"-relay"),
		nats.CustomInboxPrefix(topology.RelayInboxPrefix(a.site.Name)),
		nats.MaxReconnects(-1), a.natsErrors())
	if err != nil {
		return fmt.Errorf("relay: connect to embedded server: %w", err)
	}
	g.Go(func() error { <-ctx.Done(); nc.Close(); return nil })
	local, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	watch := newLeafWatch()
	if a.srv != nil {
		g.Go(func() error { watch.run(ctx, a.srv); return nil })
	}
	for _, sp := range specs {
		up, err := jetstream.NewWithDomain(nc, sp.from.Domain)
		if err != nil {
			return err
		}
		name := sp.linkName(a.site)
		// The link's cap holds each direction on its own: this relay
		// pulls one of them, the other end's relay the other.
		capped := a.cfg.Topology.LinkBandwidth(lowerEnd(a.site, sp.from))
		r, err := hop.New(hop.Link{
			Name: name, Upstream: up, Stream: sp.stream, Consumer: topology.RelayConsumerName(a.site.Name),
			Local: local, LocalStream: sp.localStream, Subject: sp.subject, Marks: sp.marks,
			Batch: relayBatch, BytesPerSecond: capped, LinkUp: watch.next,
			Log: a.log.With("component", "hop-relay", "link", name),
		})
		if err != nil {
			return err
		}
		if capped > 0 {
			a.metrics.setLinkCap(sp.from.Name, capped)
		}
		g.Go(func() error { return r.Run(ctx) })
	}
	return nil
}

// keepRelayMarks sets, in each plan of a stream that links fill, the
// links' mark subjects, whichever their transport: the newest message of
// a link gives its mark to a relay that takes the link over (switchLinks).
func keepRelayMarks(cfg *topology.Config, site *topology.Site, plans []trimPlan) []trimPlan {
	for _, sp := range takenLinks(cfg, site) {
		for i := range plans {
			if plans[i].stream == sp.localStream {
				plans[i].keep = append(plans[i].keep, sp.marks...)
			}
		}
	}
	return plans
}

// keepNewest lowers bound below the newest message on each keep subject.
// A quiet relay link thereby holds back the trim of a stream that other
// links fill, above its own newest message.
func keepNewest(ctx context.Context, s jetstream.Stream, keep []string, bound uint64) (uint64, error) {
	for _, subj := range keep {
		m, err := s.GetLastMsgForSubject(ctx, subj)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, fmt.Errorf("newest message on %s: %w", subj, err)
		default:
			bound = min(bound, m.Sequence-1)
		}
	}
	return bound, nil
}

// stockServerTakes refuses to provision a site, for a server leafline does
// not run, that would take a stream by the relay: nothing would run it.
func stockServerTakes(cfg *topology.Config, site *topology.Site) error {
	for _, sp := range relaySpecs(cfg, site) {
		return fmt.Errorf("edge: site %s takes %s from %s by transport %q, which needs leafline running at %s; mark the site \"server\": %q in the topology (sites[].server), so that its links use %q",
			site.Name, sp.stream, sp.from.Name, topology.TransportRelay, site.Name, topology.ServerNATS, topology.TransportSourcing)
	}
	return nil
}

// leafWatchEvery is how often a box counts its leafnode connections, and
// leafWatchFull how often it also compares their ids (a connection that
// replaced another between two counts).
const (
	leafWatchEvery = 10 * time.Millisecond
	leafWatchFull  = 500 * time.Millisecond
)

// leafWatch tells a box's relays when one of its leafnode connections
// comes up: a pull request sent before a cut was lost with the link, and
// a relay waiting on it asks again at once rather than at its expiry
// (hop.Link.LinkUp).
type leafWatch struct {
	mu sync.Mutex
	up chan struct{} // closed, and replaced, at each new connection
}

func newLeafWatch() *leafWatch { return &leafWatch{up: make(chan struct{})} }

// next returns a channel closed at the next new leafnode connection.
func (w *leafWatch) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.up
}

// run watches srv's leafnode connections until ctx is done: a count that
// grew, or a connection id not seen before, wakes the waiters.
func (w *leafWatch) run(ctx context.Context, srv *server.Server) {
	t := time.NewTicker(leafWatchEvery)
	defer t.Stop()
	var seen map[uint64]bool
	count, lastFull := srv.NumLeafNodes(), time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := srv.NumLeafNodes()
		fresh := n > count
		count = n
		if fresh || time.Since(lastFull) >= leafWatchFull {
			lastFull = time.Now()
			if lz, err := srv.Leafz(nil); err == nil {
				now := make(map[uint64]bool, len(lz.Leafs))
				for _, l := range lz.Leafs {
					now[l.ID] = true
					fresh = fresh || (seen != nil && !seen[l.ID])
				}
				seen = now
			}
		}
		if fresh {
			w.mu.Lock()
			close(w.up)
			w.up = make(chan struct{})
			w.mu.Unlock()
		}
	}
}
