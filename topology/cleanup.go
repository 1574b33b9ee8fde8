package topology

import (
	"time"

	"github.com/leafline/leafline/topology/subjects"
)

// CleanupConfig is the L1 cleanup of the origin stream (completion.cleanup):
// off unless Enabled. An origin message is deleted only when every edge it
// was routed to reported a terminal status, Grace has passed since the last
// of those receipts and no redrive is pending, after an audit record of the
// deletion is durable (see cleanup.Cleaner).
type CleanupConfig struct {
	// Enabled turns the cleanup on. Zero value: off, and the origin stream
	// keeps what its limits keep.
	Enabled bool `json:"enabled,omitempty"`
	// Grace is how long a done event's origin message is kept after its
	// last terminal receipt. Zero value means 1h.
	Grace Duration `json:"grace,omitempty"`
	// Interval between cleanup passes. Zero value means 30s.
	Interval Duration `json:"interval,omitempty"`
	// AllowDeadLettered lets an event that some edge dead-lettered (and
	// every other edge reported) be cleaned. Zero value: such events keep
	// their origin message, for a replay.
	AllowDeadLettered bool `json:"allow_dead_lettered,omitempty"`
	// AllowExpired lets an event that some edge expired (too old when it
	// reached it; and every other edge reported) be cleaned. Zero value:
	// such events keep their origin message, as dead-lettered ones do.
	AllowExpired bool `json:"allow_expired,omitempty"`
	// MaxPerPass bounds the origin messages one pass examines, 1..1000000.
	// Zero value means 10000.
	MaxPerPass int `json:"max_per_pass,omitempty"`
	// AuditStream holds one record per deleted message. Zero value means
	// "LEAFLINE_AUDIT".
	AuditStream string `json:"audit_stream,omitempty"`
	// AuditSubject is the audit records' subject prefix. Zero value means
	// "leafline.audit".
	AuditSubject string `json:"audit_subject,omitempty"`
	// AuditRetention is how long the audit stream keeps a record. Zero
	// value means 2160h (90 days).
	AuditRetention Duration `json:"audit_retention,omitempty"`
}

func (c *CleanupConfig) setDefaults() {
	setDuration(&c.Grace, time.Hour)
	setDuration(&c.Interval, 30*time.Second)
	setInt(&c.MaxPerPass, 10000)
	setString(&c.AuditStream, "LEAFLINE_AUDIT")
	setString(&c.AuditSubject, "leafline.audit")
	setDuration(&c.AuditRetention, 90*24*time.Hour)
}

// validate checks the settings on their own (every box validates them,
// whatever its role, as it does the rest of completion).
func (c *CleanupConfig) validate(p *problems) {
	const path = "completion.cleanup."
	for _, d := range []struct {
		path string
		v    Duration
	}{{path + "grace", c.Grace}, {path + "interval", c.Interval}, {path + "audit_retention", c.AuditRetention}} {
		if d.v <= 0 {
			p.add(d.path, "must be positive")
		}
	}
	p.inRange(path+"max_per_pass", c.MaxPerPass, 1, 1_000_000)
	p.name(path+"audit_stream", c.AuditStream, maxStreamName)
	if p.subject(path+"audit_subject", c.AuditSubject, false) {
		p.notReserved(path+"audit_subject", c.AuditSubject+".>")
	}
}

// validateAgainst checks the settings against the topology and the rest of
// the box config: the audit stream and subjects are leafline's own.
func (c *CleanupConfig) validateAgainst(p *problems, t *Topology, box *Config) {
	const path = "completion.cleanup."
	box.checkSubjectSpace(p, t, path+"audit_subject", c.AuditSubject+".>")
	if user, ok := t.streamUser(c.AuditStream); ok {
		p.add(path+"audit_stream", "stream name %q is already used by the topology's %s", c.AuditStream, user)
	}
	for _, o := range []namedStream{{"completion.quarantine_stream", box.Completion.QuarantineStream}, {"dead_letter.stream", box.DeadLetter.Stream}} {
		if o.name == c.AuditStream {
			p.add(path+"audit_stream", "stream name %q is already %s", c.AuditStream, o.path)
		}
	}
	if q := box.Completion.QuarantineSubject + ".>"; subjects.Check(q, true) == nil && subjects.Check(c.AuditSubject, false) == nil &&
		subjects.Overlap(c.AuditSubject+".>", q) {
		p.add(path+"audit_subject", "overlaps completion.quarantine_subject %q", box.Completion.QuarantineSubject)
	}
}
