// Package linkperm derives, from the topology, the least privilege of each
// leafnode link: the subjects a dialling site may publish to and receive
// from its upstream, for durable sourcing and for the relay, and for the
// consumer of a direct-mode edge. The box binds each link's user to them,
// `leafline topology render` writes them for stock servers, and Lint
// reports a server's user that may do more.
package linkperm

import (
	"fmt"
	"strings"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/subjects"
)

// Permissions is what a dialling site may do across its leafnode link,
// in the form of a nats-server leafnode user's permissions at the upstream
// (the accepting side): Publish lists the subjects the site may send
// upstream, Subscribe the subjects it may receive. Everything else is
// denied in both directions.
type Permissions struct {
	Publish   []string `json:"publish"`
	Subscribe []string `json:"subscribe"`
}

// Of returns the least privilege of site's link to its
// upstream: exactly the subjects of the two durable sources across the link
// (the site sourcing the upstream's stream, the upstream sourcing the
// site's receipts), as measured on nats-server 2.15 with the feature flags
// js_ack_fc_v2 and js_api_reply_v2 (which every leafline box sets, and
// which `leafline topology render` writes):
//
//	site → upstream   $JS.<up>.API.CONSUMER.RESET.<fwd>.leafline-src-<site>     bind the site's source to its durable
//	                  $JS.FC.<up>.*.<fwd>.leafline-src-<site>.*                  flow-control replies (v2)
//	                  $JS.FC.<fwd>.leafline-src-<site>.*                         flow-control replies (v1 upstream)
//	                  leafline.src.<site>.<rev>.<up>                             the site's receipts (deliveries)
//	                  $JSC.R.<site>.*.<rev>.leafline-src-<up>.*                  API replies to the upstream
//	upstream → site   leafline.src.<up>.<fwd>.<site>                             events (deliveries, heartbeats)
//	                  $JS.<site>.API.CONSUMER.RESET.<rev>.leafline-src-<up>      bind the upstream's source
//	                  $JS.FC.<site>.*.<rev>.leafline-src-<up>.*                  flow-control replies
//	                  $JSC.R.<up>.*.<fwd>.leafline-src-<site>.*                  API replies to the site
//	hub → L1          leafline.links.<hub>                                       the hub's link beats (its edges' links, for L1's console)
//
// where fwd is the stream the site sources (HA for an edge, L1A for a hub)
// and rev the stream the upstream sources from it (RE, RH); <up> and <site>
// in $JS subjects are JetStream domains. Receipts never cross the link on
// their own subjects: they travel inside the site's receipts source, so a
// site cannot put a receipt in another site's name into the upstream's
// streams, and nothing else of the JetStream API of either side is reachable.
//
// An edge in direct delivery mode sources nothing from the hub: its link
// drops the four forward-source subjects above and carries, instead, its
// own consumer on the origin stream at L1 (DirectPermissions). A hub's
// link to L1 carries the same subjects for each of its direct-mode edges,
// since their requests, deliveries and ACKs cross it too.
func Of(t *topology.Topology, site string) (Permissions, error) {
	s, ok := t.Site(site)
	if !ok {
		return Permissions{}, fmt.Errorf("linkperm: unknown site %q", site)
	}
	up, ok := t.Site(s.Upstream)
	if !ok {
		return Permissions{}, fmt.Errorf("linkperm: site %q has no upstream", site)
	}
	var fwd, rev string
	switch s.Role {
	case topology.RoleEdge:
		fwd, rev = t.Events.HubStream, t.Receipts.EdgeStream
	case topology.RoleHub:
		fwd, rev = t.Events.OriginStream, t.Receipts.HubStream
	default:
		return Permissions{}, fmt.Errorf("linkperm: site %q (%s) dials no upstream", site, s.Role)
	}
	sourced := !s.Direct() // s takes fwd from its upstream
	var lp Permissions
	if t.LinkTransport(s) == topology.TransportRelay {
		lp = relay(s, up, fwd, rev, sourced)
		for _, c := range t.Classes(s) {
			lp.Publish = append(lp.Publish, relayPull(up.Domain, fwd, topology.RelayClassConsumerName(s.Name, c.Name))...)
		}
		for _, c := range t.ReceiptClasses(s) {
			lp.Subscribe = append(lp.Subscribe, relayPull(s.Domain, rev, topology.RelayClassConsumerName(up.Name, c))...)
		}
	} else {
		lp = sourcing(s, up, fwd, rev)
	}
	if s.Role == topology.RoleHub {
		lp.Publish = append(lp.Publish, topology.LinkBeatSubject(s.Name))
	}
	var direct []*topology.Site
	switch {
	case s.Direct():
		direct = append(direct, s)
	case s.Role == topology.RoleHub:
		for _, e := range t.Downstream(s.Name) {
			if e.Direct() {
				direct = append(direct, e)
			}
		}
	}
	for _, e := range direct {
		dp, err := Direct(t, e.Name)
		if err != nil {
			return Permissions{}, err
		}
		lp.Publish = append(lp.Publish, dp.Publish...)
		lp.Subscribe = append(lp.Subscribe, dp.Subscribe...)
	}
	return lp, nil
}

// sourcing is Of for a link that uses durable sourcing.
func sourcing(s, up *topology.Site, fwd, rev string) Permissions {
	mine := topology.SourceConsumerName(s.Name) // the upstream's consumer on fwd, for s
	theirs := topology.SourceConsumerName(up.Name)
	sourced := !s.Direct() // s sources fwd from its upstream
	var lp Permissions
	if sourced {
		lp.Publish = append(lp.Publish,
			topology.APIPrefix(up.Domain)+".CONSUMER.RESET."+fwd+"."+mine,
			"$JS.FC."+up.Domain+".*."+fwd+"."+mine+".*",
			"$JS.FC."+fwd+"."+mine+".*",
		)
		lp.Subscribe = append(lp.Subscribe, topology.SourceDeliverSubject(up.Name, fwd, s.Name))
	}
	lp.Publish = append(lp.Publish,
		topology.SourceDeliverSubject(s.Name, rev, up.Name),
		"$JSC.R."+s.Domain+".*."+rev+"."+theirs+".*",
	)
	lp.Subscribe = append(lp.Subscribe,
		topology.APIPrefix(s.Domain)+".CONSUMER.RESET."+rev+"."+theirs,
		"$JS.FC."+s.Domain+".*."+rev+"."+theirs+".*",
	)
	if sourced {
		lp.Subscribe = append(lp.Subscribe, "$JSC.R."+up.Domain+".*."+fwd+"."+mine+".*")
	}
	return lp
}

// Direct returns the subjects that the consumer of a direct-mode
// edge on the origin stream at L1 needs on every link between the edge and
// L1 (edge → hub, hub → L1), and nothing more:
//
//	toward L1   $JS.<l1>.API.CONSUMER.INFO.<origin>.leafline-sink-<edge>      look the consumer up
//	            $JS.<l1>.API.CONSUMER.MSG.NEXT.<origin>.leafline-sink-<edge>  pull requests
//	            $JS.ACK.<l1>.*.<origin>.leafline-sink-<edge>.>                 ACK, NAK, InProgress, Term (v2 ACK subjects)
//	toward edge leafline.direct.<edge>.>                                       API replies and deliveries (topology.DirectInboxPrefix)
//
// where <l1> is L1's JetStream domain. L1 creates the consumer (the shape
// fixed by the topology, Site.DirectConsumer for its settings) and the edge
// binds to it: no CREATE, UPDATE or DELETE subject crosses a link, so the
// edge can neither change nor remove its consumer (and with it the record
// of what it has ACKed), nor reach any other consumer, stream or API of L1.
func Direct(t *topology.Topology, edge string) (Permissions, error) {
	e, ok := t.Site(edge)
	if !ok || e.Role != topology.RoleEdge {
		return Permissions{}, fmt.Errorf("linkperm: %q is not an edge site", edge)
	}
	l1, ok := t.L1()
	if !ok {
		return Permissions{}, fmt.Errorf("linkperm: no l1 site for edge %q to consume from", edge)
	}
	api := topology.APIPrefix(l1.Domain)
	stream, cons := t.Events.OriginStream, topology.DirectConsumerName(e.Name)
	return Permissions{
		Publish: []string{
			api + ".CONSUMER.INFO." + stream + "." + cons,
			api + ".CONSUMER.MSG.NEXT." + stream + "." + cons,
			"$JS.ACK." + l1.Domain + ".*." + stream + "." + cons + ".>",
		},
		Subscribe: []string{topology.DirectInboxPrefix(e.Name) + ".>"},
	}, nil
}

// ServerFeatureFlags returns the nats-server feature flags every leafline
// box sets, and that a stock server running a leafline site must set: they make
// the JetStream flow-control, ACK and API reply subjects carry the domain,
// stream and consumer, which is what lets Of be this narrow.
func ServerFeatureFlags() map[string]bool {
	return map[string]bool{"js_ack_fc_v2": true, "js_api_reply_v2": true}
}

// relay is what a relay link needs across the leafnode link between
// site and up, in Permissions' form: site pulls fwd from up,
// up pulls rev from site.
//
//	site → upstream   $JS.<up>.API.CONSUMER.INFO.<fwd>.leafline-relay-<site>       the consumer's info
//	                  $JS.<up>.API.CONSUMER.MSG.NEXT.<fwd>.leafline-relay-<site>   pull requests
//	                  $JS.<up>.API.CONSUMER.RESET.<fwd>.leafline-relay-<site>      deliver again after what is stored
//	                  $JS.ACK.<up>.*.<fwd>.leafline-relay-<site>.>                  ACKs and NAKs
//	                  leafline.relay.<up>.inbox.>                                   replies and deliveries to the upstream's relay
//	upstream → site   the same four for rev, leafline-relay-<up> and <site>, and leafline.relay.<site>.inbox.>
//
// An edge that takes priority classes pulls fwd through one more consumer
// per class, leafline-relay-<site>-<class>, with the same four; and the
// upstream pulls rev through one more per class lane of site's receipts
// (topology.Topology.ReceiptClasses), leafline-relay-<up>-<class>.
func relay(site, up *topology.Site, fwd, rev string, forward bool) Permissions {
	pull := relayPull
	var lp Permissions
	if forward {
		lp.Publish = append(lp.Publish, pull(up.Domain, fwd, topology.RelayConsumerName(site.Name))...)
		lp.Subscribe = append(lp.Subscribe, topology.RelayInboxPrefix(site.Name)+".>")
	}
	lp.Subscribe = append(lp.Subscribe, pull(site.Domain, rev, topology.RelayConsumerName(up.Name))...)
	lp.Publish = append(lp.Publish, topology.RelayInboxPrefix(up.Name)+".>")
	return lp
}

// Lint reports what a server's leafnode user for site (at its upstream)
// may do beyond its link's Permissions: each subject
// it may publish or subscribe to must lie within one the topology
// generates. publish and subscribe are the user's allow lists; nil means
// no permissions at all, which is full access. path names the user in the
// warnings.
func Lint(t *topology.Topology, site, path string, publish, subscribe []string) []topology.Warning {
	want, err := Of(t, site)
	if err != nil {
		return []topology.Warning{{Path: path, Msg: err.Error()}}
	}
	var out []topology.Warning
	for _, dir := range []struct {
		name       string
		have, want []string
	}{{"publish", publish, want.Publish}, {"subscribe", subscribe, want.Subscribe}} {
		if dir.have == nil {
			out = append(out, topology.Warning{Path: path, Msg: fmt.Sprintf(
				"site %q's leafnode user has no %s permissions, which is full access: it can %s any subject across its link; give it exactly the generated ones (`leafline topology permissions`)",
				site, dir.name, dir.name)})
			continue
		}
		var wider []string
		for _, s := range dir.have {
			covered := false
			for _, w := range dir.want {
				covered = covered || subjects.Subset(s, w)
			}
			if !covered {
				wider = append(wider, s)
			}
		}
		if len(wider) > 0 {
			out = append(out, topology.Warning{Path: path, Msg: fmt.Sprintf(
				"site %q's leafnode user may %s %s, beyond what its link needs (`leafline topology permissions --site %s`): a stolen %s box could reach other sites' streams or speak for them",
				site, dir.name, strings.Join(wider, ", "), site, site)})
		}
	}
	return out
}

// relayPull is what pulling consumer cons on stream in domain dom takes:
// its info, pull requests, reset, and ACKs.
func relayPull(dom, stream, cons string) []string {
	api := topology.APIPrefix(dom)
	return []string{
		api + ".CONSUMER.INFO." + stream + "." + cons,
		api + ".CONSUMER.MSG.NEXT." + stream + "." + cons,
		api + ".CONSUMER.RESET." + stream + "." + cons,
		"$JS.ACK." + dom + ".*." + stream + "." + cons + ".>",
	}
}
