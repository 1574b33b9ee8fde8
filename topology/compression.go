package topology

// Leafnode compression modes (Topology.Compression, Site.Compression), as
// nats-server names them. Each end of a leafnode link compresses what it
// sends in the mode the two ends agree on; either end decodes any level.
const (
	// CompressionOff sends everything as is.
	CompressionOff = "off"
	// CompressionAccept does not ask for compression, but follows an end
	// that does. Across a link whose two ends both accept, nothing is
	// compressed.
	CompressionAccept = "accept"
	// CompressionS2Auto picks the S2 level from the link's round-trip
	// time: none up to 10ms, fast up to 50ms, better up to 100ms, best
	// beyond. It is nats-server's default.
	CompressionS2Auto = "s2_auto"
	// CompressionS2Fast, CompressionS2Better and CompressionS2Best are the
	// fixed S2 levels: each costs more CPU than the one before and saves
	// more bytes.
	CompressionS2Fast   = "s2_fast"
	CompressionS2Better = "s2_better"
	CompressionS2Best   = "s2_best"
)

// CompressionModes lists every valid mode, in the order errors name them.
var CompressionModes = []string{
	CompressionOff, CompressionAccept, CompressionS2Auto,
	CompressionS2Fast, CompressionS2Better, CompressionS2Best,
}

// defaultCompression is the compression of a link that names none, in a
// topology that names none. It is s2_fast, not nats-server's s2_auto: a
// field link's round-trip time is long, so s2_auto picks s2_best, which
// on a hub with many links costs about twice the CPU of s2_fast per
// receipt for a few percent fewer bytes (docs/guide/links.md).
const defaultCompression = CompressionS2Fast

// LinkCompression returns the compression mode of site's leafnode link to
// its upstream: the site's own setting, else the topology's, else
// s2_fast. The dialling end (site) asks for it; the listening end follows
// (ListenerCompression). A site with no upstream (l1) has no link and
// gets "".
func (t *Topology) LinkCompression(s *Site) string {
	switch {
	case s.Upstream == "":
		return ""
	case s.Compression != "":
		return s.Compression
	case t.Compression != "":
		return t.Compression
	}
	return defaultCompression
}

// ListenerCompression returns the compression mode of site's leafnode
// listener. nats-server has one mode per listener, for every link it
// accepts, so: when every downstream link asks for the same mode the
// listener uses it too, and both directions of every link are compressed
// alike; when they differ the listener accepts, and sends each link what
// its dialling end asks for (an s2_auto link then gets s2_fast in the
// listener's direction, whatever its round-trip time). A site that nothing
// dials gets "".
func (t *Topology) ListenerCompression(s *Site) string {
	mode := ""
	for _, d := range t.Downstream(s.Name) {
		m := t.LinkCompression(d)
		switch {
		case mode == "":
			mode = m
		case m != mode:
			return CompressionAccept
		}
	}
	return mode
}

// validateCompression checks the topology's default compression and each
// site's link compression.
func (t *Topology) validateCompression(p *problems) {
	if t.Compression != "" {
		p.oneOf("compression", t.Compression, CompressionModes...)
	}
	for i := range t.Sites {
		s := &t.Sites[i]
		if s.Compression == "" {
			continue
		}
		path := sitePath(i, "compression")
		if s.Role == RoleL1 {
			p.add(path, "an l1 site has no upstream link to compress")
			continue
		}
		p.oneOf(path, s.Compression, CompressionModes...)
	}
}
