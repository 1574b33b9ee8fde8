package topology

import "github.com/leafline/leafline/topology/internal/syntax"

// BandwidthOff names no cap (Topology.Bandwidth, Site.Bandwidth): on a
// site, it lifts the topology's default cap from that site's link.
const BandwidthOff = syntax.BandwidthOff

// ParseBandwidth reads a per-link bandwidth cap (Site.Bandwidth), in
// bytes a second: "64KB/s" is 64,000, "64KiB/s" 65,536; "off" and a zero
// rate are no cap (0). An error says what is wrong with s.
func ParseBandwidth(s string) (int64, error) { return syntax.Bandwidth(s) }

// maxBandwidth bounds a configured cap.
const maxBandwidth = syntax.MaxBandwidth

// LinkBandwidth returns the cap, in bytes a second, of site's leafnode
// link to its upstream: the site's own setting, else the topology's, else
// none (0). "off" is none. The cap holds each direction of the link
// alike (events down, receipts up), each to the full cap; the relay
// enforces it (package hop), so only a relay link can be capped. A site
// with no upstream (l1), or a setting that does not parse (Validate
// reports it), gets 0.
func (t *Topology) LinkBandwidth(s *Site) int64 {
	v := t.Bandwidth
	switch {
	case s.Upstream == "":
		return 0
	case s.Bandwidth != "":
		v = s.Bandwidth
	}
	if v == "" {
		return 0
	}
	b, err := ParseBandwidth(v)
	if err != nil {
		return 0
	}
	return b
}

// validateBandwidth checks the topology's default cap and each site's: a
// value ParseBandwidth reads, on a link that has one, whose transport is
// the relay.
func (t *Topology) validateBandwidth(p *problems) {
	defaultOK := true
	if t.Bandwidth != "" {
		if _, err := ParseBandwidth(t.Bandwidth); err != nil {
			p.add("bandwidth", "%v", err)
			defaultOK = false
		}
	}
	for i := range t.Sites {
		s := &t.Sites[i]
		path := sitePath(i, "bandwidth")
		if s.Bandwidth != "" {
			if s.Role == RoleL1 {
				p.add(path, "site %s: an l1 site has no upstream link to cap", s.Name)
				continue
			}
			if _, err := ParseBandwidth(s.Bandwidth); err != nil {
				p.add(path, "site %s: %v", s.Name, err)
				continue
			}
		} else if !defaultOK {
			continue
		}
		limit := t.LinkBandwidth(s)
		if s.Upstream == "" || limit == 0 {
			continue
		}
		if s.Bandwidth == "" {
			path = "bandwidth"
		}
		switch {
		case t.LinkTransport(s) == TransportSourcing:
			p.add(path, "link %s-%s: a cap of %d bytes/s on a link whose transport is sourcing, which nats-server moves and leafline cannot cap: use transport relay on this link, or bandwidth %q on site %s",
				s.Upstream, s.Name, limit, BandwidthOff, s.Name)
		case directBelow(t, s) != "":
			p.add(path, "link %s-%s: a cap of %d bytes/s, but edge %s is in direct delivery mode: its events cross the link outside the relay, which leafline cannot cap; use delivery_mode sourced, or bandwidth %q on site %s",
				s.Upstream, s.Name, limit, directBelow(t, s), BandwidthOff, s.Name)
		}
	}
}

// directBelow names an edge in direct delivery mode whose events cross
// site's link to its upstream (site itself, or an edge under a hub), or
// returns "".
func directBelow(t *Topology, site *Site) string {
	if site.Direct() {
		return site.Name
	}
	for _, d := range t.Downstream(site.Name) {
		if d.Direct() {
			return d.Name
		}
	}
	return ""
}
