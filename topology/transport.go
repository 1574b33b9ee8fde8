package topology

// Hop transports: how messages cross a site's link to its upstream, in both
// directions (events down to the site, receipts up from it). Topology.Transport
// is the default; Site.Transport overrides it for one link.
const (
	// TransportSourcing is nats-server's durable stream sourcing: the
	// upstream's durable push consumer with AckFlowControl, bound by the
	// downstream stream. It needs no leafline process at the downstream
	// site (a stock nats-server hub can run it); under SyncAlways it
	// stores and fsyncs each message alone.
	TransportSourcing = "sourcing"
	// TransportRelay is leafline's relay (package hop): the downstream
	// site's leafline pulls batches through the link from a durable pull
	// consumer and stores each batch with one atomic publish: one fsync
	// per batch. The downstream site must run leafline.
	TransportRelay = "relay"
)

// What runs a site (Site.Server).
const (
	// ServerLeafline is a leafline box with its embedded server.
	ServerLeafline = "leafline"
	// ServerNATS is a stock nats-server, or a cluster of them.
	ServerNATS = "nats-server"
)

// LinkTransport returns the transport of site's link to its upstream: the
// site's own setting, else the topology's, else the default: the relay
// between two leafline boxes, sourcing where either end is a stock
// nats-server (Site.Server), which cannot run the relay. A site with no
// upstream (l1) has no link and gets "".
//
// The relay is the default because it fsyncs once per batch where
// sourcing fsyncs once per message (docs/guide/transports.md has the
// figures), and a link switched to it, or back, starts exactly after
// what the other transport stored.
func (t *Topology) LinkTransport(s *Site) string {
	switch {
	case s.Upstream == "":
		return ""
	case s.Transport != "":
		return s.Transport
	case t.Transport != "":
		return t.Transport
	}
	if up, ok := t.Site(s.Upstream); ok && (up.Server == ServerNATS || s.Server == ServerNATS) {
		return TransportSourcing
	}
	return TransportRelay
}

// validateTransports checks the topology's default transport and each
// site's link transport.
func (t *Topology) validateTransports(p *problems) {
	if t.Transport != "" {
		p.oneOf("transport", t.Transport, TransportRelay, TransportSourcing)
	}
	for i := range t.Sites {
		s := &t.Sites[i]
		if s.Server != "" {
			p.oneOf(sitePath(i, "server"), s.Server, ServerLeafline, ServerNATS)
		}
		if s.Transport == "" && t.Transport == "" {
			continue
		}
		path := sitePath(i, "transport")
		if s.Transport == "" {
			path = "transport"
		}
		if s.Role == RoleL1 {
			if s.Transport != "" {
				p.add(path, "an l1 site has no upstream link to choose a transport for")
			}
			continue
		}
		if s.Transport != "" {
			p.oneOf(path, s.Transport, TransportRelay, TransportSourcing)
		}
		if t.LinkTransport(s) != TransportRelay {
			continue
		}
		// The relay runs at both ends of a link (each pulls what it takes).
		if s.Server == ServerNATS {
			p.add(path, "relay on site %s's link, but %s runs nats-server (sites[].server), which cannot run the relay: use sourcing", s.Name, s.Name)
		} else if up, ok := t.Site(s.Upstream); ok && up.Server == ServerNATS {
			p.add(path, "relay on site %s's link, but its upstream %s runs nats-server (sites[].server), which cannot run the relay: use sourcing", s.Name, up.Name)
		}
	}
}

// relaySpace holds every subject of the relay transport: no configured
// subject may overlap it.
const relaySpace = "leafline.relay.>"

// RelayConsumerName is the durable pull consumer that the upstream of a
// relay link creates, on the stream the downstream site takes, for that site.
// It differs from SourceConsumerName because nats-server cannot turn a push
// consumer into a pull consumer in place.
func RelayConsumerName(downstream string) string { return "leafline-relay-" + downstream }

// RelayIngest is the subject prefix that site's relay publishes into its
// stream on; the stream maps "<prefix>.>" back to the original subject.
func RelayIngest(site, stream string) string { return "leafline.relay." + site + ".stream." + stream }

// RelayInboxPrefix is the inbox prefix of a site's relay connection: the
// replies to its pull requests and API calls, and its deliveries.
func RelayInboxPrefix(site string) string { return "leafline.relay." + site + ".inbox" }
