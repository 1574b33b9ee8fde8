package topology

import (
	"strings"
	"time"
)

// Role is what a site runs.
type Role string

const (
	// RoleL1 is the origin: the events origin stream, the receipts stream
	// sourced from the hub, and the completion service.
	RoleL1 Role = "l1"
	// RoleHub is the aggregation node between L1 and the edges.
	RoleHub Role = "hub"
	// RoleEdge is a field edge box: it processes events and returns receipts.
	RoleEdge Role = "edge"
)

// Topology is the shared description of the whole system. Every site loads
// the same file; each box adds only its local settings (see Config).
type Topology struct {
	// Events is the forward path's streams and subjects.
	Events Events `json:"events"`
	// Receipts is the return path's streams and subject prefix.
	Receipts Receipts `json:"receipts"`
	// Sites lists every box: exactly one l1, one or more hubs and edges.
	Sites []Site `json:"sites"`
	// ExpectedOutage is the longest link cut the deployment is designed to
	// ride out without an operator. Only the lint uses it (a duplicate
	// window shorter than this is reported). Zero value means 1h.
	ExpectedOutage Duration `json:"expected_outage,omitempty"`
	// Transport is the hop transport of every link whose site names none:
	// "relay" or "sourcing" (TransportRelay, TransportSourcing). Zero
	// value means the default (LinkTransport).
	Transport string `json:"transport,omitempty"`
	// Compression is the leafnode compression of every link whose site
	// names none: off, accept, s2_auto, s2_fast, s2_better or s2_best
	// (CompressionOff…). Zero value means s2_fast (defaultCompression).
	Compression string `json:"compression,omitempty"`
	// Bandwidth is the cap on every link whose site names none, in bytes
	// a second ("64KB/s", "1MiB/s"; ParseBandwidth), or "off". Zero value
	// means no cap.
	Bandwidth string `json:"bandwidth,omitempty"`
	// Backlog bounds what a hub holds for each edge whose site names no
	// bound of its own (see Backlog). Zero value means the defaults.
	Backlog Backlog `json:"backlog,omitzero"`
}

// Events describes the forward path L1 → hub → edge.
type Events struct {
	// OriginStream is the stream at L1 that events are published into.
	// Zero value means "L1A".
	OriginStream string `json:"origin_stream,omitempty"`
	// Subjects are the origin stream's subjects. Zero value means ["events.>"].
	Subjects []string `json:"subjects,omitempty"`
	// HubStream is the hub's stream sourced from the origin. Zero means "HA".
	HubStream string `json:"hub_stream,omitempty"`
	// EdgeStream is each edge's stream sourced from the hub. Zero means "L2A".
	EdgeStream string `json:"edge_stream,omitempty"`
	// DuplicateWindow is the Nats-Msg-Id window of the origin stream and
	// each edge's DLQ (the receipts stream has its own,
	// Receipts.DuplicateWindow). The streams that only source (hub and
	// edge events, hub and L1 receipts) keep no window. Zero means 2m.
	DuplicateWindow Duration `json:"duplicate_window,omitempty"`
	// ExpireAfter are the expiry rules by subject: an event older than its
	// rule's After when an edge's runner reaches it is not processed; it
	// gets an expired receipt (see ExpiryFor). Zero value means no event
	// expires unless it carries its own expiry header.
	ExpireAfter []ExpireRule `json:"expire_after,omitempty"`
	// Priorities are the priority classes, most urgent first (see
	// Priority). Zero value means every event is normal.
	Priorities []Priority `json:"priorities,omitempty"`
}

// Receipts describes the return path edge → hub → L1.
type Receipts struct {
	// SubjectPrefix: an edge publishes on "<prefix>.<site>.<status>".
	// Zero value means "leafline.receipts".
	SubjectPrefix string `json:"subject_prefix,omitempty"`
	// EdgeStream is each edge's local receipts stream. Zero means "RE".
	EdgeStream string `json:"edge_stream,omitempty"`
	// HubStream is the hub's stream sourcing every edge's receipts. Zero means "RH".
	HubStream string `json:"hub_stream,omitempty"`
	// L1Stream is L1's stream sourced from the hub. Zero means "R1".
	L1Stream string `json:"l1_stream,omitempty"`
	// DuplicateWindow is the Nats-Msg-Id window of each edge's receipts
	// stream. It absorbs the republish of a receipt whose PubAck was slow
	// or lost (the relay republishes what is pending after 2s, each try
	// bounded by outbox.publish_timeout); a later copy goes up and L1
	// counts it as a duplicate. A publish that fails part-way marks what
	// it stored (outbox.PartialError), so a full stream does not make
	// copies of those. The server keeps about 200 bytes per receipt in
	// the window, and up to three times the window's receipts until it
	// compacts its list (nats-server 2.15), so a long window costs an
	// edge under its memory limit drain rate; 10s keeps it at the rate of
	// an unlimited box. Zero means 10s.
	DuplicateWindow Duration `json:"duplicate_window,omitempty"`
}

// Site is one box in the topology.
type Site struct {
	// Name identifies the site: 1..64 bytes of [A-Za-z0-9_-], unique.
	// It appears in subjects and consumer names. Required.
	Name string `json:"name"`
	// Role is l1, hub or edge. Required.
	Role Role `json:"role"`
	// Domain is the site's JetStream domain. Zero value means the site name.
	Domain string `json:"domain,omitempty"`
	// Upstream names the site this one dials: required for hub and edge,
	// forbidden for l1.
	Upstream string `json:"upstream,omitempty"`
	// Leafnode holds the site's leafnode addresses.
	Leafnode SiteLeafnode `json:"leafnode"`
	// Filter restricts the events an edge receives (edge only); it must lie
	// within one of Events.Subjects. Zero value means every event subject
	// (SetDefaults writes the subject in when there is exactly one).
	Filter string `json:"filter,omitempty"`
	// ReceiptKey is the public nkey (ed25519, "U…") that this edge signs its
	// receipts with (edge only). When set, L1 accepts from this site only
	// receipts signed with it; the seed is in the edge box's
	// signing.key_file. Zero value: the site's receipts are unsigned.
	ReceiptKey string `json:"receipt_key,omitempty"`
	// DeliveryMode is how an edge gets its events (edge only):
	// "sourced" (zero value) consumes the edge's own copy, Events.EdgeStream,
	// durably sourced from the hub, and keeps processing while its links
	// are down; "direct" consumes Events.OriginStream on L1 through the
	// leafnode links with the L1 domain's API prefix, with a durable pull
	// consumer DirectConsumerName(site) that ACKs the original delivery on
	// L1, and processes nothing while either link is down. It is part of
	// the topology, not of the box config, because the hub's and L1's link
	// permissions and the hub's streams follow from it.
	DeliveryMode string `json:"delivery_mode,omitempty"`
	// DirectConsumer tunes the consumer that L1 creates on the origin
	// stream for this edge in direct delivery mode (edge in direct mode
	// only). L1 owns that consumer: the edge can neither create, change
	// nor delete it (linkperm.Direct), so its settings live here, where
	// L1 reads them, and not in the edge's box config.
	DirectConsumer DirectConsumer `json:"direct_consumer,omitzero"`
	// Transport is the hop transport of this site's link to its upstream
	// (hub and edge): "relay" or "sourcing". Zero value means
	// Topology.Transport (LinkTransport).
	Transport string `json:"transport,omitempty"`
	// Server is what runs the site: "leafline" (zero value), a leafline
	// box with its embedded server, or "nats-server", a stock nats-server
	// or a cluster of them (`leafline topology render`, `leafline
	// provision`, and boxes in cluster mode as their clients). A link
	// with a nats-server end cannot use the relay, and defaults to
	// sourcing (LinkTransport).
	Server string `json:"server,omitempty"`
	// Compression is the leafnode compression of this site's link to its
	// upstream (hub and edge), one of Topology.Compression's values. This
	// site asks for it when it dials; the upstream's listener follows
	// (ListenerCompression). Zero value means Topology.Compression
	// (LinkCompression).
	Compression string `json:"compression,omitempty"`
	// Bandwidth caps this site's link to its upstream (hub and edge), in
	// bytes a second ("64KB/s"; ParseBandwidth), each direction on its
	// own: the relay moves at most that many message bytes a second down
	// the link and as many up. "off" lifts Topology.Bandwidth from this
	// link. The link's transport must be the relay. Zero value means
	// Topology.Bandwidth (LinkBandwidth).
	Bandwidth string `json:"bandwidth,omitempty"`
	// Backlog bounds what this edge's hub holds for it (edge only), each
	// field in place of Topology.Backlog's (SiteBacklog). Zero value
	// means the topology's.
	Backlog Backlog `json:"backlog,omitzero"`
	// Retired takes an edge out of the fleet while keeping its name and
	// receipt key known (see Retire): its hub holds nothing for it and
	// takes no link from it, and L1 expects nothing more of it and closes
	// its pending events as retired. Receipts it sent before are still
	// applied. False means an active site.
	Retired bool `json:"retired,omitempty"`
}

// Edge delivery modes (Site.DeliveryMode).
const (
	// DeliverySourced: the edge consumes its own sourced events stream.
	DeliverySourced = "sourced"
	// DeliveryDirect: the edge consumes the origin stream on L1 directly.
	DeliveryDirect = "direct"
)

// DirectConsumer is the box-local part of a direct-mode edge's consumer on
// the origin stream at L1 (Site.DirectConsumer). Its shape is fixed: a
// durable pull consumer named DirectConsumerName(site), explicit ACK,
// delivering every event on the site's filter, with no inactive threshold.
type DirectConsumer struct {
	// AckWait is the consumer's AckWait: it must cover a batch's sink
	// write plus the round trip across both links. Zero value means 30s
	// (the edge box's delivery.ack_wait default); 1s..1h.
	AckWait Duration `json:"ack_wait,omitempty"`
	// MaxAckPending is the consumer's MaxAckPending: at least the edge's
	// delivery.batch_size. Zero value means 4096; at most 1,000,000.
	MaxAckPending int `json:"max_ack_pending,omitempty"`
	// MaxDeliver is how often the server delivers one event before it
	// stops (the edge's delivery.max_deliver_action leave). Zero value
	// means unlimited, which an edge that dead-letters on its last
	// delivery (max_deliver_action dead_letter) needs: it counts
	// deliveries itself.
	MaxDeliver int `json:"max_deliver,omitempty"`
}

// Defaults of DirectConsumer's zero values.
const (
	DefaultDirectAckWait       = 30 * time.Second
	DefaultDirectMaxAckPending = 4096
)

// DirectConsumerSettings returns s.DirectConsumer with its zero values
// replaced by their defaults.
func (s *Site) DirectConsumerSettings() DirectConsumer {
	dc := s.DirectConsumer
	setDuration(&dc.AckWait, DefaultDirectAckWait)
	setInt(&dc.MaxAckPending, DefaultDirectMaxAckPending)
	return dc
}

// Direct reports whether s is an edge in direct delivery mode.
func (s *Site) Direct() bool {
	return s.Role == RoleEdge && s.DeliveryMode == DeliveryDirect
}

// SiteLeafnode holds the addresses of a site's leafnode links.
type SiteLeafnode struct {
	// Listen is host:port where downstream sites connect (l1 and hub).
	Listen string `json:"listen,omitempty"`
	// UpstreamURL is how this site reaches its upstream (hub and edge).
	// Zero value means "nats-leaf://" + the upstream site's Listen.
	// Schemes: nats-leaf, tls, nats, ws, wss. It may carry a user name but
	// never a password (see Auth).
	UpstreamURL string `json:"upstream_url,omitempty"`
	// TLS is this site's leafnode listener policy (l1 and hub sites only):
	// "off" (zero value: plain TCP, which the lint reports), "on" (TLS;
	// dialling sites verify this site's certificate) or "mutual" (TLS, and
	// every dialling site must present a certificate signed by the CA in
	// this box's leafnode.listen_tls.ca_file). The certificate files are
	// box-local settings (Config.Leafnode).
	TLS string `json:"tls,omitempty"`
	// Auth is how this site authenticates to its upstream (hub and edge
	// sites only). It holds only public material; the secret half is in
	// this site's box config (leafnode.upstream_auth).
	Auth LeafAuth `json:"auth,omitempty"`
}

// SetDefaults fills zero values with the documented defaults.
func (t *Topology) SetDefaults() {
	e := &t.Events
	setString(&e.OriginStream, "L1A")
	if len(e.Subjects) == 0 {
		e.Subjects = []string{"events.>"}
	}
	setString(&e.HubStream, "HA")
	setString(&e.EdgeStream, "L2A")
	if e.DuplicateWindow == 0 {
		e.DuplicateWindow = Duration(defaultDuplicateWindow)
	}
	r := &t.Receipts
	setString(&r.SubjectPrefix, "leafline.receipts")
	setString(&r.EdgeStream, "RE")
	setString(&r.HubStream, "RH")
	setString(&r.L1Stream, "R1")
	if r.DuplicateWindow == 0 {
		r.DuplicateWindow = Duration(defaultReceiptsDuplicateWindow)
	}
	setDuration(&t.ExpectedOutage, defaultExpectedOutage)
	for i := range t.Sites {
		s := &t.Sites[i]
		setString(&s.Domain, s.Name)
		s.Leafnode.setDefaults(s)
		if s.Role == RoleEdge && s.Filter == "" && len(e.Subjects) == 1 {
			s.Filter = e.Subjects[0]
		}
		if s.Role == RoleEdge {
			setString(&s.DeliveryMode, DeliverySourced)
		}
	}
	for i := range t.Sites {
		s := &t.Sites[i]
		if s.Leafnode.UpstreamURL == "" && s.Upstream != "" {
			if up, ok := t.Site(s.Upstream); ok && up.Leafnode.Listen != "" {
				s.Leafnode.UpstreamURL = "nats-leaf://" + up.Leafnode.Listen
			}
		}
	}
}

// Site returns the site with the given name.
func (t *Topology) Site(name string) (*Site, bool) {
	for i := range t.Sites {
		if t.Sites[i].Name == name {
			return &t.Sites[i], true
		}
	}
	return nil, false
}

// L1 returns the (single) l1 site.
func (t *Topology) L1() (*Site, bool) {
	for i := range t.Sites {
		if t.Sites[i].Role == RoleL1 {
			return &t.Sites[i], true
		}
	}
	return nil, false
}

// Downstream returns the sites whose upstream is name, in topology order,
// but the retired ones (Site.Retired).
func (t *Topology) Downstream(name string) []*Site {
	var out []*Site
	for i := range t.Sites {
		if t.Sites[i].Upstream == name && !t.Sites[i].Retired {
			out = append(out, &t.Sites[i])
		}
	}
	return out
}

// Edges returns every edge site in topology order, but the retired ones
// (Retired).
func (t *Topology) Edges() []*Site {
	var out []*Site
	for i := range t.Sites {
		if t.Sites[i].Role == RoleEdge && !t.Sites[i].Retired {
			out = append(out, &t.Sites[i])
		}
	}
	return out
}

// ReceiptSubject is the subject an edge publishes a receipt with the given
// status on: "<prefix>.<site>.<status>".
func (t *Topology) ReceiptSubject(site, status string) string {
	return t.Receipts.SubjectPrefix + "." + site + "." + status
}

// ReceiptFilter is the subject filter of an edge's receipts stream.
func (t *Topology) ReceiptFilter(site string) string {
	return t.Receipts.SubjectPrefix + "." + site + ".>"
}

// SourceConsumerName is the name of the durable push consumer that the owner
// of a stream creates for the downstream site that sources it.
func SourceConsumerName(downstream string) string {
	return "leafline-src-" + downstream
}

// SourceDeliverSubject is the deliver subject of that consumer:
// "leafline.src.<owner>.<stream>.<downstream>". It is unique per link, so
// that a hub sourcing the same stream name from several edges never shares
// one deliver subject between them.
func SourceDeliverSubject(owner, stream, downstream string) string {
	return "leafline.src." + owner + "." + stream + "." + downstream
}

// DirectConsumerName is the name of the durable pull consumer that an edge
// in direct delivery mode creates on the origin stream at L1. It is unique
// per edge, and the link permissions name it.
func DirectConsumerName(edge string) string {
	return "leafline-sink-" + edge
}

// DirectInboxPrefix is the inbox prefix of the connection with which an edge
// in direct delivery mode talks to L1: "leafline.direct.<edge>". Every API
// reply and every delivery of its consumer is sent under it, so that the
// links let exactly these replies through to exactly that edge (a shared
// "_INBOX.>" would let every site read every other site's replies).
func DirectInboxPrefix(edge string) string {
	return "leafline.direct." + edge
}

// APIPrefix is the JetStream API prefix that reaches a domain across a leafnode.
func APIPrefix(domain string) string {
	return "$JS." + domain + ".API"
}

func setString(p *string, def string) {
	if *p == "" {
		*p = def
	}
}

// SubjectMatches reports whether the literal subject is matched by filter
// (NATS wildcards: "*" one token, ">" one or more trailing tokens).
func SubjectMatches(filter, subject string) bool {
	ft := strings.Split(filter, ".")
	st := strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		if f != "*" && f != st[i] {
			return false
		}
	}
	return len(ft) == len(st)
}
