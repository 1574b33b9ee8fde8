package topology

import "net"

// checkListenerClash reports two of a box's listeners (nats.listen,
// ops.listen, its site's leafnode.listen) on one port of one address: the
// second could never bind, and the box would fail only once it had begun
// to start. Port 0 (any free port) never clashes; a host that is empty or
// unspecified (0.0.0.0, ::) clashes with every host.
func (c *Config) checkListenerClash(p *problems, s *Site) {
	type listener struct{ path, addr string }
	ls := []listener{{"nats.listen", c.NATS.Listen}, {"ops.listen", c.Ops.Listen}}
	if s.Leafnode.Listen != "" {
		ls = append(ls, listener{"sites[" + s.Name + "].leafnode.listen", s.Leafnode.Listen})
	}
	for i := range ls {
		for j := i + 1; j < len(ls); j++ {
			if sameListener(ls[i].addr, ls[j].addr) {
				p.add(ls[j].path, "%q is the address of %s as well: one of the two could never listen", ls[j].addr, ls[i].path)
			}
		}
	}
}

func sameListener(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" {
		return false
	}
	any := func(h string) bool { ip := net.ParseIP(h); return h == "" || (ip != nil && ip.IsUnspecified()) }
	return ha == hb || any(ha) || any(hb)
}
