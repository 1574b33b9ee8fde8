package topology

import (
	"strings"
	"time"

	"github.com/leafline/leafline/topology/internal/syntax"
	"github.com/leafline/leafline/topology/subjects"
)

// Validate checks the topology as a whole and returns a *ValidationError
// listing every problem with its path, or nil. Call SetDefaults first: a
// zero value that has a default is otherwise reported as missing.
func (t *Topology) Validate() error {
	var p problems
	t.validate(&p)
	return p.err("")
}

func (t *Topology) validate(p *problems) {
	t.validateStreams(p)
	t.validateEvents(p)
	t.validateReceipts(p)
	t.validateSites(p)
	t.validateTransports(p)
	t.validateCompression(p)
	t.validateBandwidth(p)
}

// namedStream is a stream name with the path it is configured at.
type namedStream struct{ path, name string }

// streams lists every stream the topology names.
func (t *Topology) streams() []namedStream {
	out := []namedStream{
		{"events.origin_stream", t.Events.OriginStream},
		{"events.hub_stream", t.Events.HubStream},
		{"events.edge_stream", t.Events.EdgeStream},
		{"receipts.edge_stream", t.Receipts.EdgeStream},
		{"receipts.hub_stream", t.Receipts.HubStream},
		{"receipts.l1_stream", t.Receipts.L1Stream},
	}
	for i, c := range t.Events.Priorities {
		out = append(out, namedStream{elemPath("events.priorities", i) + ".name", ClassStream(t.Events.EdgeStream, c.Name)})
	}
	return out
}

// streamUser returns the path of the topology stream called name, if any.
func (t *Topology) streamUser(name string) (string, bool) {
	for _, s := range t.streams() {
		if s.name == name {
			return s.path, true
		}
	}
	return "", false
}

func (t *Topology) validateStreams(p *problems) {
	first := map[string]string{}
	for _, s := range t.streams() {
		if !p.name(s.path, s.name, maxStreamName) {
			continue
		}
		if prev, ok := first[s.name]; ok {
			p.add(s.path, "stream name %q is also used by %s; every stream needs its own name", s.name, prev)
			continue
		}
		first[s.name] = s.path
	}
}

// eventSubjects returns the valid event subjects with their paths.
func (t *Topology) eventSubjects() []namedStream {
	var out []namedStream
	for i, s := range t.Events.Subjects {
		if subjects.Check(s, true) == nil {
			out = append(out, namedStream{elemPath("events.subjects", i), s})
		}
	}
	return out
}

func (t *Topology) validateEvents(p *problems) {
	e := t.Events
	if len(e.Subjects) == 0 {
		p.add("events.subjects", "at least one subject is required")
	}
	for i, s := range e.Subjects {
		path := elemPath("events.subjects", i)
		if !p.subject(path, s, true) {
			continue
		}
		for j := range i {
			if subjects.Check(e.Subjects[j], true) == nil && subjects.Overlap(s, e.Subjects[j]) {
				p.add(path, "%q overlaps events.subjects[%d] (%q); a stream's subjects must not overlap", s, j, e.Subjects[j])
				break
			}
		}
		p.notReserved(path, s)
	}
	if w := e.DuplicateWindow.D(); w < time.Second || w > 24*time.Hour {
		p.add("events.duplicate_window", "%s is outside 1s..24h", w)
	}
	if w := t.Receipts.DuplicateWindow.D(); w < time.Second || w > 24*time.Hour {
		p.add("receipts.duplicate_window", "%s is outside 1s..24h", w)
	}
	if o := t.ExpectedOutage.D(); o < time.Second {
		p.add("expected_outage", "%s is below 1s", o)
	}
	t.validateExpiry(p)
	t.validatePriorities(p)
}

func (t *Topology) validateReceipts(p *problems) {
	const path = "receipts.subject_prefix"
	prefix := t.Receipts.SubjectPrefix
	if !p.subject(path, prefix, false) {
		return
	}
	for _, ev := range t.eventSubjects() {
		if subjects.Overlap(prefix+".>", ev.name) {
			p.add(path, "%q overlaps %s (%q): the events streams would capture receipts", prefix, ev.path, ev.name)
		}
	}
	p.notReserved(path, prefix+".>")
}

func (t *Topology) validateSites(p *problems) {
	if len(t.Sites) == 0 {
		p.add("sites", "at least one site is required")
		return
	}
	t.validateRoles(p)
	t.validateNames(p)
	for i := range t.Sites {
		t.validateUpstream(p, i)
		t.validateLeafnode(p, i)
		t.validateFilter(p, i)
		t.validateDeliveryMode(p, i)
		t.validateDirectConsumer(p, i)
		t.validateLinkSecurity(p, i)
		t.validateReceiptKey(p, i)
	}
	t.validateLinkCredentials(p)
	t.validateCycles(p)
	t.validateBacklog(p)
	t.validateRetired(p)
}

// validateRoles checks every role and that there is one l1, a hub and an edge.
func (t *Topology) validateRoles(p *problems) {
	l1 := -1
	var hubs, edges int
	for i, s := range t.Sites {
		path := fieldPath(elemPath("sites", i), "role")
		switch s.Role {
		case RoleL1:
			if l1 >= 0 {
				p.add(path, "a second l1 site (sites[%d] is l1); exactly one is allowed", l1)
				continue
			}
			l1 = i
		case RoleHub:
			hubs++
		case RoleEdge:
			edges++
		case "":
			p.add(path, "required: l1, hub or edge")
		default:
			p.add(path, "unknown role %q; want l1, hub or edge", s.Role)
		}
	}
	if l1 < 0 {
		p.add("sites", "no site has role l1; exactly one is required")
	}
	if hubs == 0 {
		p.add("sites", "no site has role hub; at least one is required")
	}
	if edges == 0 {
		p.add("sites", "no site has role edge; at least one is required")
	}
}

// validateNames checks site names and domains, and that both are unique.
func (t *Topology) validateNames(p *problems) {
	names, domains := map[string]int{}, map[string]int{}
	for i, s := range t.Sites {
		site := elemPath("sites", i)
		dupName := false
		if p.name(fieldPath(site, "name"), s.Name, maxSiteName) {
			if j, ok := names[s.Name]; ok {
				p.add(fieldPath(site, "name"), "duplicate site name %q (also sites[%d])", s.Name, j)
				dupName = true
			} else {
				names[s.Name] = i
			}
		}
		if s.Domain == s.Name {
			// The default (or the same value): the name's checks cover it.
			if syntax.Name(s.Name, maxSiteName) != nil {
				continue
			}
			if j, ok := domains[s.Domain]; ok && !dupName {
				p.add(fieldPath(site, "domain"), "domain %q is already the domain of sites[%d]", s.Domain, j)
			} else if !ok {
				domains[s.Domain] = i
			}
			continue
		}
		if !p.name(fieldPath(site, "domain"), s.Domain, maxSiteName) {
			continue
		}
		if j, ok := domains[s.Domain]; ok {
			p.add(fieldPath(site, "domain"), "domain %q is already the domain of sites[%d]; every site is its own JetStream domain", s.Domain, j)
			continue
		}
		domains[s.Domain] = i
	}
}

// wantUpstream is the role a site of the given role dials, or "" for none.
func wantUpstream(r Role) Role {
	switch r {
	case RoleHub:
		return RoleL1
	case RoleEdge:
		return RoleHub
	}
	return ""
}

func (t *Topology) validateUpstream(p *problems, i int) {
	s := &t.Sites[i]
	path := fieldPath(elemPath("sites", i), "upstream")
	want := wantUpstream(s.Role)
	switch {
	case s.Role == RoleL1 && s.Upstream != "":
		p.add(path, "an l1 site has no upstream")
	case s.Upstream == "":
		if want != "" {
			p.add(path, "required: %s site dials %s site", article(s.Role), article(want))
		}
	case s.Upstream == s.Name:
		p.add(path, "a site cannot be its own upstream")
	default:
		up, ok := t.Site(s.Upstream)
		switch {
		case !ok:
			p.add(path, "unknown site %q", s.Upstream)
		case want != "" && up.Role != want:
			p.add(path, "%q is %s site; the upstream of %s site must be %s site", s.Upstream, article(up.Role), article(s.Role), article(want))
		}
	}
}

// article prefixes a role with "a" or "an" ("an l1", "a hub").
func article(r Role) string {
	if r == RoleL1 || r == RoleEdge {
		return "an " + string(r)
	}
	return "a " + string(r)
}

func (t *Topology) validateLeafnode(p *problems, i int) {
	s := &t.Sites[i]
	site := elemPath("sites", i)
	listen := fieldPath(fieldPath(site, "leafnode"), "listen")
	var down []*Site
	for _, d := range t.Downstream(s.Name) {
		if d != s {
			down = append(down, d)
		}
	}
	switch {
	case s.Leafnode.Listen != "" && s.Role == RoleEdge:
		p.add(listen, "an edge site accepts no leafnode connections; only l1 and hub sites listen")
	case s.Leafnode.Listen != "":
		if err := syntax.HostPort(s.Leafnode.Listen, 1, false); err != nil {
			p.add(listen, "%v", err)
		}
	case len(down) > 0 && s.Name != "":
		p.add(listen, "required: site %q dials this site", down[0].Name)
	}
	url := fieldPath(fieldPath(site, "leafnode"), "upstream_url")
	switch {
	case s.Leafnode.UpstreamURL == "":
	case s.Role == RoleL1:
		p.add(url, "an l1 site dials no upstream")
	case t.derivedFromBadListen(s):
		// The default URL of an upstream whose listen address is reported.
	default:
		if err := checkUpstreamURL(s.Leafnode.UpstreamURL); err != nil {
			p.add(url, "%v", err)
		}
	}
}

// derivedFromBadListen reports whether s's upstream URL is the default
// derived from an upstream listen address that is itself invalid.
func (t *Topology) derivedFromBadListen(s *Site) bool {
	up, ok := t.Site(s.Upstream)
	return ok && s.Leafnode.UpstreamURL == "nats-leaf://"+up.Leafnode.Listen &&
		syntax.HostPort(up.Leafnode.Listen, 1, false) != nil
}

func (t *Topology) validateFilter(p *problems, i int) {
	s := &t.Sites[i]
	path := fieldPath(elemPath("sites", i), "filter")
	if s.Filter == "" {
		return
	}
	if s.Role != RoleEdge {
		p.add(path, "only edge sites have a filter")
		return
	}
	if subjects.Check(s.Filter, true) != nil && len(t.Events.Subjects) == 1 && s.Filter == t.Events.Subjects[0] {
		return // the default filter: the event subject's own problem covers it
	}
	if !p.subject(path, s.Filter, true) {
		return
	}
	evs := t.eventSubjects()
	for _, ev := range evs {
		if subjects.Subset(s.Filter, ev.name) {
			return
		}
	}
	if len(evs) > 0 {
		p.add(path, "%q is not within the event subjects (%s)", s.Filter, strings.Join(t.Events.Subjects, ", "))
	}
}

// validateDeliveryMode checks sites[i].delivery_mode.
func (t *Topology) validateDeliveryMode(p *problems, i int) {
	s := &t.Sites[i]
	if s.DeliveryMode == "" {
		return
	}
	path := sitePath(i, "delivery_mode")
	if s.Role != RoleEdge {
		p.add(path, "only edge sites have a delivery mode (%q or %q)", DeliverySourced, DeliveryDirect)
		return
	}
	p.oneOf(path, s.DeliveryMode, DeliverySourced, DeliveryDirect)
}

// validateDirectConsumer checks sites[i].direct_consumer.
func (t *Topology) validateDirectConsumer(p *problems, i int) {
	s := &t.Sites[i]
	dc := s.DirectConsumer
	if dc == (DirectConsumer{}) {
		return
	}
	path := sitePath(i, "direct_consumer")
	if !s.Direct() {
		p.add(path, "only an edge with delivery_mode %q has a consumer on L1", DeliveryDirect)
		return
	}
	if w := dc.AckWait.D(); w != 0 && (w < time.Second || w > time.Hour) {
		p.add(path+".ack_wait", "must be 1s..1h, got %s", w)
	}
	if dc.MaxAckPending != 0 {
		p.inRange(path+".max_ack_pending", dc.MaxAckPending, 1, 1_000_000)
	}
	if dc.MaxDeliver < 0 {
		p.add(path+".max_deliver", "must be 0 (unlimited) or at least 1, got %d", dc.MaxDeliver)
	}
}

// validateCycles reports each cycle in the upstream chain once, at its
// first site. A site that is its own upstream is reported by validateUpstream.
func (t *Topology) validateCycles(p *problems) {
	next := func(i int) int {
		for j := range t.Sites {
			if t.Sites[j].Name == t.Sites[i].Upstream && j != i {
				return j
			}
		}
		return -1
	}
	for i := range t.Sites {
		chain := []string{t.Sites[i].Name}
		j := next(i)
		for steps := 0; j >= 0 && j != i && steps < len(t.Sites); steps++ {
			if j < i {
				break // the cycle, if any, was reported at a lower index
			}
			chain = append(chain, t.Sites[j].Name)
			j = next(j)
		}
		if j == i {
			chain = append(chain, t.Sites[i].Name)
			p.add(fieldPath(elemPath("sites", i), "upstream"), "the upstream chain forms a cycle: %s", strings.Join(chain, " → "))
		}
	}
}
