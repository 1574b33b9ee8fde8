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
	// TransportRelay is leafline's relay (package relay): the downstream
	// site's leafline pulls batches through the link from a durable pull
	// consumer and stores each batch with one atomic publish: one fsync
	// per batch. The downstream site must run leafline.
	TransportRelay = "relay"
)

// defaultTransport is the transport of a link that names none, in a
// topology that names none. See the README's "Hop transports" section for
// the measurement it rests on.
const defaultTransport = TransportSourcing

// LinkTransport returns the transport of site's link to its upstream: the
// site's own setting, else the topology's, else the default. A site with
// no upstream (l1) has no link and gets "".
func (t *Topology) LinkTransport(s *Site) string {
	switch {
	case s.Upstream == "":
		return ""
	case s.Transport != "":
		return s.Transport
	case t.Transport != "":
		return t.Transport
	}
	return defaultTransport
}

// validateTransports checks the topology's default transport and each
// site's link transport.
func (t *Topology) validateTransports(p *problems) {
	if t.Transport != "" {
		p.oneOf("transport", t.Transport, TransportRelay, TransportSourcing)
	}
	for i := range t.Sites {
		s := &t.Sites[i]
		if s.Transport == "" {
			continue
		}
		path := sitePath(i, "transport")
		if s.Role == RoleL1 {
			p.add(path, "an l1 site has no upstream link to choose a transport for")
			continue
		}
		p.oneOf(path, s.Transport, TransportRelay, TransportSourcing)
	}
}
