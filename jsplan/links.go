package jsplan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology"
)

// RelayBatch is how many messages a relay link moves per fetch, and so
// per atomic batch and fsync; it is also its consumer's MaxAckPending
// (package hop requires at most one fetch of unACKed messages).
const RelayBatch = 1000

// relayAckWait bounds how long a delivery lost in flight holds a relay
// link back: it comes again after this.
const relayAckWait = 5 * time.Second

// LowerEnd returns the downstream end of the link between site and other
// (one is the other's upstream): the site whose setting chooses the
// link's transport.
func LowerEnd(site, other *topology.Site) *topology.Site {
	if other.Name == site.Upstream {
		return site
	}
	return other
}

// Relayed reports whether the link between site and other uses the relay.
func Relayed(t *topology.Topology, site, other *topology.Site) bool {
	return t.LinkTransport(LowerEnd(site, other)) == topology.TransportRelay
}

// takerName is the durable consumer that site creates on one of its
// streams for down, the downstream end of a link that takes the stream.
func takerName(t *topology.Topology, site, down *topology.Site) string {
	if Relayed(t, site, down) {
		return topology.RelayConsumerName(down.Name)
	}
	return topology.SourceConsumerName(down.Name)
}

// relayConsumerConfig is the durable pull consumer that a relay link's
// downstream site pulls through the link. Its ACK policy is all: the relay
// ACKs a batch with one message instead of one per message, which halves
// the messages crossing the link. A consumer created with explicit ACKs
// keeps them (Reconcile; the server cannot change a policy in place), and
// the relay ACKs it message by message.
func relayConsumerConfig(down *topology.Site, filters ...string) jetstream.ConsumerConfig {
	c := jetstream.ConsumerConfig{
		Durable:         topology.RelayConsumerName(down.Name),
		Description:     "leafline relay for " + down.Name,
		DeliverPolicy:   jetstream.DeliverAllPolicy,
		AckPolicy:       jetstream.AckAllPolicy,
		AckWait:         relayAckWait,
		MaxAckPending:   RelayBatch,
		MaxRequestBatch: RelayBatch,
		MaxDeliver:      -1,
	}
	setFilters(&c, filters)
	return c
}

// relayClassConsumerConfig is the consumer of a relay link that carries
// one priority class to down: the relay consumer narrowed to the class's
// subjects within down's filter.
func relayClassConsumerConfig(down *topology.Site, c topology.Class) jetstream.ConsumerConfig {
	cfg := relayConsumerConfig(down)
	cfg.Durable = topology.RelayClassConsumerName(down.Name, c.Name)
	cfg.Description = "leafline relay of class " + c.Name + " for " + down.Name
	if len(c.Filters) == 1 {
		cfg.FilterSubject = c.Filters[0]
	} else {
		cfg.FilterSubjects = c.Filters
	}
	return cfg
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

// TakenLink is one link on which a site is the taker (the downstream end):
// by the relay, which the site runs, or by stream sourcing.
type TakenLink struct {
	From        *topology.Site // the upstream end's site
	Stream      string         // the stream taken, at from
	LocalStream string         // the stream filled, at this site
	Subject     func(string) string
	Marks       []string // subjects of localStream that hold only this link's messages
	Relay       bool     // the link's transport is the relay
	// Consumer is the durable consumer the relay pulls, on Stream at From.
	Consumer string
	// Class is the priority class the link carries, "" for a link that
	// carries every event (or receipt) of its stream; ClassOf, if set,
	// names the class of each message, which its class's link carries
	// instead, if the site runs one (hop.Link.Skip).
	Class   string
	ClassOf func(subject string) string
	// Rank orders the links of one leafnode link that carry one stream
	// by urgency, 0 the most urgent: each class by its place in the
	// topology, then the link of the rest (hop.Link.Rank).
	Rank int
}

// LinkName is the name of the relay of sp at site (hop.Link.Name, and the
// hop.HeaderLink of what it stores).
func (sp TakenLink) LinkName(site *topology.Site) string {
	name := sp.From.Name + "-" + sp.Stream + "-" + site.Name
	if sp.Class != "" {
		name += "-" + sp.Class
	}
	return name
}

// IsSource reports whether src is the source of link sp: the stream it
// takes, from the domain of the site it takes it from.
func (sp TakenLink) IsSource(src *jetstream.StreamSource) bool {
	return src.Name == sp.Stream && src.External != nil && src.External.APIPrefix == topology.APIPrefix(sp.From.Domain)
}

// RelayLinks lists the relay links that site runs: one per link of its
// own whose transport is relay and on which it is the taker.
func RelayLinks(cfg *topology.Config, site *topology.Site) []TakenLink {
	var out []TakenLink
	for _, sp := range TakenLinks(cfg, site) {
		if sp.Relay {
			out = append(out, sp)
		}
	}
	return out
}

// TakenLinks lists the links on which site is the taker, by either
// transport.
func TakenLinks(cfg *topology.Config, site *topology.Site) []TakenLink {
	t := cfg.Topology
	ev, rc := t.Events, t.Receipts
	ingest := func(local string) func(string) string {
		p := topology.RelayIngest(site.Name, local) + "."
		return func(s string) string { return p + s }
	}
	var out []TakenLink
	up, _ := t.Site(site.Upstream)
	link := func(from *topology.Site, stream, local string, subject func(string) string, marks []string) TakenLink {
		return TakenLink{From: from, Stream: stream, LocalStream: local, Subject: subject, Marks: marks,
			Relay: Relayed(t, site, from), Consumer: topology.RelayConsumerName(site.Name)}
	}
	switch site.Role {
	case topology.RoleL1:
		for _, hub := range t.Downstream(site.Name) {
			edges := t.Downstream(hub.Name)
			out = append(out, receiptLinks(link(hub, rc.HubStream, rc.L1Stream, ingest(rc.L1Stream), nil), t, hub, edges)...)
		}
	case topology.RoleHub:
		out = append(out, link(up, ev.OriginStream, ev.HubStream, ingest(ev.HubStream), []string{">"}))
		for _, e := range t.Downstream(site.Name) {
			// The edge's link carries only its own receipts
			// (ReceiptBinding): the site token is rewritten.
			in, prefix := ingest(rc.HubStream), rc.SubjectPrefix+"."
			bind := func(s string) string {
				rest, ok := strings.CutPrefix(s, prefix)
				if _, status, found := strings.Cut(rest, "."); ok && found {
					s = prefix + e.Name + "." + status
				}
				return in(s)
			}
			out = append(out, receiptLinks(link(e, rc.EdgeStream, rc.HubStream, bind, nil), t, e, []*topology.Site{e})...)
		}
	case topology.RoleEdge:
		if site.Direct() {
			break
		}
		normal := link(up, ev.HubStream, ev.EdgeStream, ingest(ev.EdgeStream), []string{">"})
		classes := t.Classes(site)
		if len(classes) > 0 {
			// Each class is its own link into its own stream; the
			// normal link leaves the classes' events to them.
			normal.ClassOf = ev.ClassOf
		}
		normal.Rank = len(classes)
		out = append(out, normal)
		for i, c := range classes {
			cl := link(up, ev.HubStream, c.Stream, ingest(c.Stream), []string{">"})
			cl.Consumer, cl.Class, cl.Rank = topology.RelayClassConsumerName(site.Name, c.Name), c.Name, i
			out = append(out, cl)
		}
	}
	return out
}

// receiptLinks are the links of one receipts stream from the site from,
// which carries the receipts of edges: normal, the link of the receipts of
// no class, and over the relay one link per class lane of from
// (topology.Topology.ReceiptClasses), each through its own consumer into
// the same stream. Each link's marks are the subjects of its own lane of
// each edge's receipts, so no link reads its mark from another's.
func receiptLinks(normal TakenLink, t *topology.Topology, from *topology.Site, edges []*topology.Site) []TakenLink {
	lane := func(class string) []string {
		var marks []string
		for _, e := range edges {
			marks = append(marks, receipt.ClassSubject(t.ReceiptSubject(e.Name, "*"), class))
		}
		if len(marks) == 0 {
			// A hub with no edge left (each moved or retired) may still
			// hold their receipts: the link's marks are then every
			// site's subjects. Their newest message is its tip or, when
			// another link's, none: it then takes its upstream after
			// the upstream's ACK floor.
			marks = append(marks, receipt.ClassSubject(t.ReceiptSubject("*", "*"), class))
		}
		return marks
	}
	normal.Marks = lane("")
	if !normal.Relay {
		return []TakenLink{normal}
	}
	classes := t.ReceiptClasses(from)
	out := []TakenLink{normal}
	for i, c := range classes {
		cl := normal
		cl.Marks, cl.Class, cl.Rank = lane(c), c, i
		cl.Consumer = receipt.ClassConsumer(normal.Consumer, c)
		out = append(out, cl)
	}
	if len(classes) > 0 {
		out[0].ClassOf = func(s string) string { _, c := receipt.SplitClass(t.Receipts.SubjectPrefix, s); return c }
		out[0].Rank = len(classes)
	}
	return out
}

// KeepRelayMarks sets, in each trim plan of a stream that links fill, the
// links' mark subjects, whichever their transport: the newest message of
// a link gives its mark to a relay that takes the link over (see box/switch.go).
func KeepRelayMarks(cfg *topology.Config, site *topology.Site, plans []TrimPlan) []TrimPlan {
	for _, sp := range TakenLinks(cfg, site) {
		for i := range plans {
			if plans[i].Stream == sp.LocalStream {
				plans[i].Keep = append(plans[i].Keep, KeepLink{Name: sp.LinkName(site), Marks: sp.Marks})
			}
		}
	}
	return plans
}

// TipKeep is how long the trim keeps a link's newest message once it is
// no longer the stream's last: far longer than a relay takes to have its
// upstream record the ACK of what it stored. Past that, the upstream's
// ACK floor holds the link's place (a relay link that finds no tip takes
// its upstream after that floor, package hop), and a quiet link, such as
// the receipts link of a parked edge, no longer holds back the trim of a
// stream that other links fill.
const TipKeep = time.Minute

// KeepLink is a link into a stream, by its name (TakenLink.LinkName) and
// the subjects that hold its messages there.
type KeepLink struct {
	Name  string
	Marks []string
}

// Tips are where the newest message of each relay link stands in its
// stream, as the box's relays report it, by link name. Safe for
// concurrent use; the zero value is empty.
type Tips struct {
	mu sync.Mutex
	m  map[string]Tip
}

// Tip is where a link's newest message stands: its sequence (0: none)
// and when it was stored.
type Tip struct {
	Seq  uint64
	Time time.Time
}

// Set records where link's newest message stands.
func (t *Tips) Set(link string, at Tip) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]Tip{}
	}
	t.m[link] = at
}

// Get returns where link's newest message stands, if its relay said.
func (t *Tips) Get(link string) (Tip, bool) {
	if t == nil {
		return Tip{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.m[link]
	return at, ok
}

// keepNewest lowers bound below each link's newest message on its mark
// subjects (the newest of them all, as the link reads its tip) while that
// message is the stream's last (last) or younger than TipKeep. Where
// tips knows a link's, it is not read from the stream.
func keepNewest(ctx context.Context, s jetstream.Stream, keep []KeepLink, tips *Tips, bound, last uint64, now time.Time) (uint64, error) {
	for _, k := range keep {
		newest, ok := tips.Get(k.Name)
		if !ok {
			var err error
			if newest, err = newestOn(ctx, s, k.Marks); err != nil {
				return 0, err
			}
		}
		if newest.Seq > 0 && (newest.Seq >= last || now.Sub(newest.Time) < TipKeep) {
			bound = min(bound, newest.Seq-1)
		}
	}
	return bound, nil
}

// newestOn reads the stream's newest message on any of subjects.
func newestOn(ctx context.Context, s jetstream.Stream, subjects []string) (Tip, error) {
	var newest Tip
	for _, subj := range subjects {
		m, err := s.GetLastMsgForSubject(ctx, subj)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return Tip{}, fmt.Errorf("newest message on %s: %w", subj, err)
		case m.Sequence > newest.Seq:
			newest = Tip{Seq: m.Sequence, Time: m.Time}
		}
	}
	return newest, nil
}

// StockServerTakes refuses to provision a site, for a server leafline does
// not run, that would take a stream by the Relay: nothing would run it.
func StockServerTakes(cfg *topology.Config, site *topology.Site) error {
	for _, sp := range RelayLinks(cfg, site) {
		return fmt.Errorf("jsplan: site %s takes %s from %s by transport %q, which needs leafline running at %s; mark the site \"server\": %q in the topology (sites[].server), so that its links use %q",
			site.Name, sp.Stream, sp.From.Name, topology.TransportRelay, site.Name, topology.ServerNATS, topology.TransportSourcing)
	}
	return nil
}

// ReceiptBinding is the subject transform of the hub's source of an edge's
// receipts stream, which binds every receipt that link delivers to the
// edge's own site:
//
//	<prefix>.*.*  →  <prefix>.<site>.{{wildcard(2)}}
//
// An edge controls its own server, and so the subjects in its receipts
// stream; whatever site a receipt's subject names there, the hub stores it
// under the site of the link it came through. A subject of any other shape
// is stored unchanged, and L1 refuses it, since it does not name its site
// and status (a receipt's subject must be exactly topology.ReceiptSubject of the
// site and status in its body, a bundle's ReceiptSubject of the site of
// its receipts and "bundle"). A stock nats-server applies it too: it is
// part of the stream configuration that `leafline provision` writes.
//
// NOTE: a stream source bound to a durable consumer cannot filter (the
// server refuses FilterSubject with a durable, and applies no filter to
// what the durable delivers); a transform is what the server applies to
// every message of the source.
func ReceiptBinding(t *topology.Topology, site string) (source, destination string) {
	p := t.Receipts.SubjectPrefix
	return p + ".*.*", p + "." + site + ".{{wildcard(2)}}"
}
