package topology

import (
	"strings"

	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology/subjects"
)

// Priority is a class of events that overtakes the others on the hub's
// link to each edge and in each edge's runner. An event's class is that of
// the first class one of whose subjects matches its subject; an event of
// no class is "normal".
type Priority struct {
	// Name names the class: lowercase letters, digits and '_', at most
	// 16 bytes, not "normal".
	Name string `json:"name"`
	// Subjects are the class's subjects (wildcards allowed), within
	// events.subjects, overlapping no other class's.
	Subjects []string `json:"subjects"`
}

// NormalClass is the class of an event that no priority class matches.
const NormalClass = "normal"

// maxPriorities bounds events.priorities: each class is a stream and a
// link at every edge.
const maxPriorities = 8

// Class is one priority class as an edge takes it.
type Class struct {
	// Name is the class's name (Priority.Name).
	Name string
	// Stream is the edge's stream of the class's events (ClassStream).
	Stream string
	// Filters are the class's subjects within the edge's filter.
	Filters []string
}

// ClassStream is the name of an edge's stream of a class's events: the
// events stream's name and the class's, "L2A_URGENT".
func ClassStream(edgeStream, class string) string {
	return edgeStream + "_" + strings.ToUpper(class)
}

// RelayClassConsumerName is the durable pull consumer that a site creates
// for a relay link that carries one class to downstream: the hub's on HA
// for an edge, an edge's on RE and the hub's on RH for the receipts of
// the class (receipt.ClassSubject).
func RelayClassConsumerName(downstream, class string) string {
	return receipt.ClassConsumer(RelayConsumerName(downstream), class)
}

// ClassOf returns the class of a literal subject: the name of the first
// priority class with a subject that matches it, or NormalClass.
func (e Events) ClassOf(subject string) string {
	for _, c := range e.Priorities {
		for _, s := range c.Subjects {
			if subjects.Matches(s, subject) {
				return c.Name
			}
		}
	}
	return NormalClass
}

// Classes returns the priority classes that edge takes, most urgent
// first: each class with a subject within the edge's filter, with its
// subjects narrowed to the filter. A direct-mode edge takes none.
func (t *Topology) Classes(edge *Site) []Class {
	if edge.Role != RoleEdge || edge.Direct() {
		return nil
	}
	var out []Class
	for _, c := range t.Events.Priorities {
		cl := Class{Name: c.Name, Stream: ClassStream(t.Events.EdgeStream, c.Name)}
		for _, s := range c.Subjects {
			if edge.Filter == "" {
				cl.Filters = append(cl.Filters, s)
			} else if f, ok := subjects.Intersect(s, edge.Filter); ok {
				cl.Filters = append(cl.Filters, f)
			}
		}
		if len(cl.Filters) > 0 {
			out = append(out, cl)
		}
	}
	return out
}

// ReceiptClasses returns the classes whose receipts travel up from site
// in lanes of their own (receipt.ClassSubject), most urgent first: an
// edge's own classes (Classes); at a hub, those of its edges; at L1,
// those of every edge.
func (t *Topology) ReceiptClasses(site *Site) []string {
	below := func(e *Site) bool {
		switch site.Role {
		case RoleEdge:
			return e == site
		case RoleHub:
			return e.Upstream == site.Name
		}
		return true
	}
	taken := map[string]bool{}
	for i := range t.Sites {
		e := &t.Sites[i]
		if e.Role != RoleEdge || !below(e) {
			continue
		}
		for _, c := range t.Classes(e) {
			taken[c.Name] = true
		}
	}
	var out []string
	for _, c := range t.Events.Priorities {
		if taken[c.Name] {
			out = append(out, c.Name)
		}
	}
	return out
}

// validatePriorities checks events.priorities: names, subjects within the
// event subjects and in one class at most, and the relay on the link to
// each edge that takes a class.
func (t *Topology) validatePriorities(p *problems) {
	classes := t.Events.Priorities
	if len(classes) > maxPriorities {
		p.add("events.priorities", "%d classes, limit %d", len(classes), maxPriorities)
		return
	}
	names := map[string]bool{}
	var seen []namedStream
	for i, c := range classes {
		path := elemPath("events.priorities", i)
		switch {
		case c.Name == NormalClass:
			p.add(path+".name", "%q is the class of every event no class matches", c.Name)
		case c.Name == receipt.BundleToken:
			p.add(path+".name", "%q is the token of a receipt bundle's subject", c.Name)
		case !receipt.ValidClass(c.Name):
			p.add(path+".name", "%q: use 1 to 16 lowercase letters, digits or '_'", c.Name)
		case names[c.Name]:
			p.add(path+".name", "%q names two classes", c.Name)
		}
		names[c.Name] = true
		if len(c.Subjects) == 0 {
			p.add(path+".subjects", "required: at least one subject")
		}
		for j, s := range c.Subjects {
			sp := elemPath(path+".subjects", j)
			if !p.subject(sp, s, true) {
				continue
			}
			for _, o := range seen {
				if subjects.Overlap(s, o.name) {
					p.add(sp, "%q overlaps %q (%s): an event is in one class at most", s, o.name, o.path)
				}
			}
			seen = append(seen, namedStream{sp, s})
			t.withinEvents(p, sp, s)
		}
	}
	for i := range t.Sites {
		s := &t.Sites[i]
		if s.Role == RoleEdge && len(t.Classes(s)) > 0 && t.LinkTransport(s) != TransportRelay {
			p.add(elemPath("sites", i), "takes priority classes (events.priorities) over transport %q; a class overtakes a backlog only over the relay", t.LinkTransport(s))
		}
		if s.Role == RoleHub && len(t.ReceiptClasses(s)) > 0 && t.LinkTransport(s) != TransportRelay {
			p.add(elemPath("sites", i), "carries the receipts of priority classes (events.priorities) to L1 over transport %q; a class's receipts overtake a backlog only over the relay", t.LinkTransport(s))
		}
	}
}
