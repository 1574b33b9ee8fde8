package topology

import (
	"time"

	"github.com/leafline/leafline/topology/subjects"
)

// ExpireRule gives the events on Subject an expiry.
type ExpireRule struct {
	// Subject is a subject (wildcards allowed) within events.subjects.
	Subject string `json:"subject"`
	// After is how long after its publish at L1 an event on Subject may
	// still be processed, at least 1s.
	After Duration `json:"after"`
}

// maxExpireRules bounds events.expire_after: each event is matched
// against the rules in order.
const maxExpireRules = 256

// ExpiryFor returns the expire_after of a literal subject: the After of the
// first rule whose subject matches it, or zero (never expires) when none
// does. An event's own headers override it (see receipt.Deadline).
func (e Events) ExpiryFor(subject string) time.Duration {
	for _, r := range e.ExpireAfter {
		if subjects.Subset(subject, r.Subject) {
			return r.After.D()
		}
	}
	return 0
}

// validateExpiry checks events.expire_after: a valid subject within the
// event subjects, not repeated, and an After of at least 1s.
func (t *Topology) validateExpiry(p *problems) {
	rules := t.Events.ExpireAfter
	if len(rules) > maxExpireRules {
		p.add("events.expire_after", "%d rules, limit %d", len(rules), maxExpireRules)
		return
	}
	seen := map[string]int{}
	for i, r := range rules {
		path := elemPath("events.expire_after", i)
		if r.After.D() < time.Second {
			p.add(path+".after", "%s is below 1s (leave the subject out to never expire it)", r.After.D())
		}
		if !p.subject(path+".subject", r.Subject, true) {
			continue
		}
		if j, ok := seen[r.Subject]; ok {
			p.add(path+".subject", "%q is also the subject of events.expire_after[%d]; the first rule that matches applies", r.Subject, j)
			continue
		}
		seen[r.Subject] = i
		t.withinEvents(p, path+".subject", r.Subject)
	}
}

// withinEvents records a problem if the subject s is not within one of
// the valid event subjects (when there are any).
func (t *Topology) withinEvents(p *problems, path, s string) {
	within := false
	for _, e := range t.eventSubjects() {
		within = within || subjects.Subset(s, e.name)
	}
	if !within && len(t.eventSubjects()) > 0 {
		p.add(path, "%q is not within the event subjects", s)
	}
}
