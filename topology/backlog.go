package topology

import (
	"strings"
	"time"

	"github.com/leafline/leafline/topology/internal/syntax"
)

// Backlog bounds what a hub holds for one edge in its events stream
// (Events.HubStream): the messages after what the edge has taken. A hub
// whose stream fills stops taking events for all its edges, so one edge
// that stays away (parked, switched off, cut off for days) must not hold
// it. Past either bound the hub releases the edge's oldest held events,
// recording how far, and L1 sends them again, to that edge alone, once it
// is back (the origin stream keeps them until they are done). A released
// event is never lost: it is delivered later, from further up.
type Backlog struct {
	// MaxBytes is the most the hub holds for the edge, in bytes
	// ("48MiB"; ParseSize). Zero value means three quarters of the hub
	// box's jetstream.max_stream_bytes (DefaultBacklogShare), so that no
	// single edge can fill the stream.
	MaxBytes string `json:"max_bytes,omitempty"`
	// MaxAge is how long the hub holds an event the edge has not taken.
	// Zero value means DefaultBacklogMaxAge.
	MaxAge Duration `json:"max_age,omitempty"`
}

// Backlog defaults.
const (
	// DefaultBacklogMaxAge is a week: a vehicle parked over a long
	// weekend, or a site shut for a holiday, finds its events at its hub.
	DefaultBacklogMaxAge = 7 * 24 * time.Hour
	// DefaultBacklogShare is the share of its events stream's byte limit
	// that a hub holds for one edge at most (3/4).
	DefaultBacklogShare = 0.75
)

// ParseSize reads a size in bytes: "48MiB" is 50,331,648, "64MB"
// 64,000,000 (units B, kB, KB, MB, GB, KiB, MiB, GiB). An error says what
// is wrong with s.
func ParseSize(s string) (int64, error) { return syntax.Size(s) }

// SiteBacklog returns the bounds of what the hub of edge s holds for it,
// given the hub's stream byte limit: the site's own, else the topology's,
// else the defaults. A setting that does not parse (Validate reports it)
// counts as unset.
func (t *Topology) SiteBacklog(s *Site, streamMaxBytes int64) (maxBytes int64, maxAge time.Duration) {
	maxBytes = int64(float64(streamMaxBytes) * DefaultBacklogShare)
	for _, v := range []string{t.Backlog.MaxBytes, s.Backlog.MaxBytes} {
		if b, err := ParseSize(v); v != "" && err == nil {
			maxBytes = b
		}
	}
	maxAge = DefaultBacklogMaxAge
	for _, d := range []Duration{t.Backlog.MaxAge, s.Backlog.MaxAge} {
		if d > 0 {
			maxAge = d.D()
		}
	}
	return maxBytes, maxAge
}

// validateBacklog checks the topology's backlog bounds and each edge's.
func (t *Topology) validateBacklog(p *problems) {
	check := func(path string, b Backlog) {
		if b.MaxBytes != "" {
			if _, err := ParseSize(b.MaxBytes); err != nil {
				p.add(fieldPath(path, "max_bytes"), "%v", err)
			}
		}
		if a := b.MaxAge.D(); b.MaxAge != 0 && a < time.Minute {
			p.add(fieldPath(path, "max_age"), "%s is below 1m: an edge would be released at its first cut", a)
		}
	}
	check("backlog", t.Backlog)
	for i := range t.Sites {
		s := &t.Sites[i]
		if s.Backlog == (Backlog{}) {
			continue
		}
		if s.Role != RoleEdge {
			p.add(sitePath(i, "backlog"), "site %s: only an edge has a backlog at its hub", s.Name)
			continue
		}
		check(sitePath(i, "backlog"), s.Backlog)
	}
}

// validateRetired checks that only edges are retired.
func (t *Topology) validateRetired(p *problems) {
	for i := range t.Sites {
		if s := &t.Sites[i]; s.Retired && s.Role != RoleEdge {
			p.add(sitePath(i, "retired"), "site %s: only an edge can be retired (a %s carries other sites' links)", s.Name, s.Role)
		}
	}
}

// Retired returns the retired edge sites (Site.Retired) in topology order.
func (t *Topology) Retired() []*Site {
	var out []*Site
	for i := range t.Sites {
		if t.Sites[i].Retired {
			out = append(out, &t.Sites[i])
		}
	}
	return out
}

// addressSpace holds every AddressedSubject: no configured subject may
// overlap it.
const addressSpace = "leafline.to.>"

// AddressedSubject is the subject on which L1 sends the event that was
// published on subject again to the edge site alone: its hub's consumer
// for that edge takes it beside the edge's filter, and the edge's runner
// hands it to the sink on subject (Unaddressed).
func AddressedSubject(site, subject string) string { return addressPrefix(site) + subject }

// AddressFilter is the subject filter of every event addressed to site.
func AddressFilter(site string) string { return addressPrefix(site) + ">" }

func addressPrefix(site string) string { return "leafline.to." + site + "." }

// Unaddressed returns the subject an event addressed to site was first
// published on, and whether subject was addressed to site; any other
// subject is returned as it is.
func Unaddressed(site, subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, addressPrefix(site))
	if !ok || rest == "" {
		return subject, false
	}
	return rest, true
}

// AddressSpace is the subject space of every addressed event, which the
// origin stream takes beside its events' subjects.
func AddressSpace() string { return addressSpace }
