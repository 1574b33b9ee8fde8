package jsplan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology"
)

// TrimEvery is how often a box deletes from its streams what their takers
// have taken.
const TrimEvery = time.Second

// TrimPlan names a stream the box owns and the durable consumers that take
// its messages: the box's own (the sink runner on L2A, the completion
// service on R1) or the next hops' source consumers (RE, RH, HA). Each
// ACKs a message only once it is safe elsewhere: the sink runner after its
// commit and the receipt's PubAck, the completion service after its KV
// write, a source consumer when the downstream's flow-control reply says
// it has stored it (AckFlowControl).
type TrimPlan struct {
	Stream    string
	Consumers []string
	// Keep are the links into the stream: a link's newest message on its
	// mark subjects holds its high-water mark (package hop), and is kept
	// while the link may need it (keepNewest).
	Keep []KeepLink
	// Tips, if set, tells where the links of Keep that report it stand
	// (hop.Link.Stored): the trim then reads only the others' marks.
	Tips *Tips
	// Untaken: the stream has no taker (a hub left without an edge that
	// takes its events stream): everything but what Keep keeps is
	// trimmed, where a plan with no Consumers trims nothing.
	Untaken bool
	// Lanes: every consumer of a receipts class lane beside one of
	// Consumers (receipt.ClassConsumer) bounds the trim too, also one
	// whose class the topology no longer names: the lane's receipts that
	// another link left to it stay until it has taken them.
	Lanes bool
	// Budgets bound what the stream holds for each site that takes it
	// (a hub's events stream, for each edge): their consumers bound the
	// trim only up to the site's budget (see Budget). With Releases, a
	// site past its budget is released; without, the trim only measures
	// the sites' backlogs.
	Budgets  []Budget
	Releases Releases
	// Origin returns the upstream sequence of a message of the stream
	// (the link's mark that it carries), for a Release.
	Origin func(nats.Header) (uint64, bool)
}

// TrimPlans lists the streams of a site that are trimmed. L1A is not: it
// is the origin, which L1's tracker and redrive read. Neither is the DLQ,
// which is for operators.
func TrimPlans(cfg *topology.Config, site *topology.Site) []TrimPlan {
	return KeepRelayMarks(cfg, site, trimTakers(cfg, site))
}

func trimTakers(cfg *topology.Config, site *topology.Site) []TrimPlan {
	t := cfg.Topology
	up, _ := t.Site(site.Upstream)
	switch site.Role {
	case topology.RoleL1:
		takers := []string{cfg.Completion.Consumer}
		for _, c := range t.ReceiptClasses(site) {
			takers = append(takers, receipt.ClassConsumer(cfg.Completion.Consumer, c))
		}
		return []TrimPlan{{Stream: t.Receipts.L1Stream, Consumers: takers, Lanes: true}}
	case topology.RoleHub:
		var edges []string
		for _, e := range t.Downstream(site.Name) {
			if !e.Direct() {
				edges = append(edges, takerName(t, site, e))
			}
			for _, c := range t.Classes(e) {
				edges = append(edges, topology.RelayClassConsumerName(e.Name, c.Name))
			}
		}
		return []TrimPlan{
			{Stream: t.Events.HubStream, Consumers: edges, Budgets: budgets(cfg, site), Untaken: len(edges) == 0},
			{Stream: t.Receipts.HubStream, Consumers: receiptTakers(t, site, up), Lanes: true},
		}
	case topology.RoleEdge:
		p := []TrimPlan{{Stream: t.Receipts.EdgeStream, Consumers: receiptTakers(t, site, up), Lanes: true}}
		if !site.Direct() {
			p = append(p, TrimPlan{Stream: t.Events.EdgeStream, Consumers: []string{cfg.Delivery.Consumer}})
		}
		for _, c := range t.Classes(site) {
			p = append(p, TrimPlan{Stream: c.Stream, Consumers: []string{cfg.Delivery.Consumer}})
		}
		return p
	}
	return nil
}

// receiptTakers are the consumers that up takes site's receipts stream
// with: that of its link, and over the relay one per class lane
// (serveLanes).
func receiptTakers(t *topology.Topology, site, up *topology.Site) []string {
	out := []string{takerName(t, site, up)}
	if Relayed(t, site, up) {
		for _, c := range t.ReceiptClasses(site) {
			out = append(out, topology.RelayClassConsumerName(up.Name, c))
		}
	}
	return out
}

// trimBound returns the highest stream sequence up to which every
// consumer of p has taken every message it will ever be given (takenUpTo),
// given the stream's last sequence read before, or 0. A consumer that does
// not exist takes nothing: the stream is then not trimmed at all, so that
// a stream keeps everything until its takers exist.
//
// The consumers of p's Budgets bound it up to their site's floor, and a
// site past its budget is released first (budgetBound); their backlogs
// are returned.
func trimBound(ctx context.Context, s jetstream.Stream, p TrimPlan, st jetstream.StreamState, now time.Time) (uint64, []Backlog, error) {
	if len(p.Consumers) == 0 {
		if p.Untaken {
			return st.LastSeq, nil, nil
		}
		return 0, nil, nil
	}
	// One listing reads every consumer of the stream, pull (the box's
	// own) or push (a source consumer).
	infos := map[string]*jetstream.ConsumerInfo{}
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		infos[ci.Name] = ci
	}
	if err := l.Err(); err != nil {
		return 0, nil, fmt.Errorf("consumers: %w", err)
	}
	last := st.LastSeq
	bound := last
	for _, name := range boundedBy(p, infos) {
		if p.budgeted(name) {
			continue
		}
		ci, ok := infos[name]
		if !ok {
			return 0, nil, nil
		}
		taken, err := takenUpTo(ctx, s, ci, last)
		if err != nil {
			return 0, nil, fmt.Errorf("consumer %s: %w", name, err)
		}
		bound = min(bound, taken)
	}
	bound, backlogs, ok, err := p.budgetBound(ctx, s, infos, st, bound, now)
	if err != nil || !ok {
		return 0, nil, err
	}
	return bound, backlogs, nil
}

// boundedBy returns the consumers of infos that bound p's trim:
// p.Consumers, and with p.Lanes the consumers of their lanes.
func boundedBy(p TrimPlan, infos map[string]*jetstream.ConsumerInfo) []string {
	out := slices.Clone(p.Consumers)
	if !p.Lanes {
		return out
	}
	for name := range infos {
		for _, c := range p.Consumers {
			if _, ok := receipt.LaneOf(c, name); ok && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// takenUpTo returns the highest stream sequence up to which the consumer
// has taken every message it will ever be given, at most last.
//
// That is its ACK floor: every message up to it was ACKed or was never
// its own. A filtered consumer is also never given the messages after the
// floor up to the next one of its subjects, which is looked up in the
// stream; that matters for a quiet edge's consumer on HA, whose ACK floor
// stays at the last message of its own subjects.
//
// Nothing else in the consumer's info is used, since nats-server
// (v2.15.3) does not report it consistently:
//
//   - its pending count: a stored message is signalled to the stream's
//     consumers asynchronously, so a consumer can read as having nothing
//     pending while the stream already holds a message for it
//     (TestTrim_NewMessageNotYetCounted);
//   - its delivered sequence: the count of unACKed messages comes from the
//     consumer's memory and the delivered sequence from its store, and
//     they can disagree: right after a link came back, a source consumer
//     can read nothing unACKed while its delivered sequence stands above
//     its ACK floor, and the next hop has not stored what lies between
//     (TestTrim_DeliveredAheadOfAckFloor).
func takenUpTo(ctx context.Context, s jetstream.Stream, ci *jetstream.ConsumerInfo, last uint64) (uint64, error) {
	taken := min(ci.AckFloor.Stream, last)
	filters := ci.Config.FilterSubjects
	if ci.Config.FilterSubject != "" {
		filters = []string{ci.Config.FilterSubject}
	}
	if taken >= last || len(filters) == 0 {
		return taken, nil
	}
	next := last + 1
	for _, f := range filters {
		m, err := s.GetMsg(ctx, taken+1, jetstream.WithGetMsgSubject(f))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, fmt.Errorf("next message on %s: %w", f, err)
		default:
			next = min(next, m.Sequence)
		}
	}
	return next - 1, nil
}

// trim deletes from p's stream every message up to trimBound and returns
// how many it deleted. It purges by sequence, so the server drops whole
// blocks at once instead of one message per ACK. Only trim deletes from
// these streams, always a prefix, so the messages up to bound are the
// sequences from the first one on.
//
// A purge makes nats-server (v2.15.3) forget which of a consumer's
// messages it was about to redeliver at once (a NAK without delay, an
// expired AckWait): they stay pending, unACKed and above the purge, and
// come again when their AckWait expires. That delays them; it loses
// nothing. The sink runner NAKs with a delay, which is not affected.
func TrimStream(ctx context.Context, js jetstream.JetStream, p TrimPlan) (uint64, error) {
	n, _, err := TrimStreamAt(ctx, js, p, time.Now())
	return n, err
}

// TrimStreamAt is TrimStream as of now, which also returns the backlogs
// of p's Budgets.
func TrimStreamAt(ctx context.Context, js jetstream.JetStream, p TrimPlan, now time.Time) (uint64, []Backlog, error) {
	s, err := js.Stream(ctx, p.Stream)
	if err != nil {
		return 0, nil, err
	}
	st := s.CachedInfo().State
	if st.Msgs == 0 && len(p.Budgets) == 0 {
		return 0, nil, nil
	}
	bound, backlogs, err := trimBound(ctx, s, p, st, now)
	if err == nil {
		bound, err = keepNewest(ctx, s, p.Keep, p.Tips, bound, st.LastSeq, now)
	}
	if err != nil || st.Msgs == 0 || bound < st.FirstSeq {
		return 0, backlogs, err
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(bound+1)); err != nil {
		return 0, backlogs, err
	}
	return bound + 1 - st.FirstSeq, backlogs, nil
}

// Trimmed is what one trim pass deleted from one stream.
type Trimmed struct {
	Stream string
	Msgs   uint64
}

// Trim deletes, once, from each stream of the config's site that is
// trimmed, the messages every taker of it has ACKed, as a running box does
// every second. It is for a site whose server leafline does not run (a
// stock nats-server provisioned with Provision). It stops at the first
// stream it cannot trim and returns what it did before.
func Trim(ctx context.Context, js jetstream.JetStream, cfg *topology.Config) ([]Trimmed, error) {
	if cfg == nil || cfg.Topology == nil {
		return nil, errors.New("jsplan: configuration has no topology")
	}
	site, ok := cfg.Topology.Site(cfg.Site)
	if !ok {
		return nil, errors.New("jsplan: site " + cfg.Site + " is not in the topology")
	}
	var out []Trimmed
	for _, p := range TrimPlans(cfg, site) {
		n, err := TrimStream(ctx, js, p)
		if err != nil {
			return out, fmt.Errorf("stream %s: %w", p.Stream, err)
		}
		out = append(out, Trimmed{p.Stream, n})
	}
	return out, nil
}
