package topology

import (
	"fmt"
	"time"

	"github.com/leafline/leafline/topology/subjects"
)

// CleanupConfig is the L1 cleanup of the origin stream (completion.cleanup):
// on unless Enabled is false. An origin message is deleted only when every edge it
// was routed to reported a terminal status, Grace has passed since the last
// of those receipts and no redrive is pending, after an audit record of the
// deletion is durable (see cleanup.Cleaner).
type CleanupConfig struct {
	// Enabled: false turns the cleanup off, and the origin stream then
	// keeps every event until its limits refuse new ones. Zero value
	// (absent): on. Read it with On.
	Enabled *bool `json:"enabled,omitempty"`
	// Grace is how long a done event's origin message is kept after its
	// last terminal receipt. Zero value means 1h.
	Grace Duration `json:"grace,omitempty"`
	// PressureAt: from this fill of the origin stream (bytes or messages
	// against its limits, 0..1) the cleanup keeps a done event only
	// PressureGrace, and runs its passes one after another while they
	// delete. Zero value means 0.5.
	PressureAt float64 `json:"pressure_at,omitempty"`
	// PressureGrace is the grace period under pressure. Zero value means
	// 2s.
	PressureGrace Duration `json:"pressure_grace,omitempty"`
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
	// AuditMaxBytes bounds the audit stream the cleanup creates: past it
	// (or AuditRetention) its oldest records go. Zero value means 1 GiB;
	// -1, no limit but AuditRetention.
	AuditMaxBytes int64 `json:"audit_max_bytes,omitempty"`
}

// On reports whether the cleanup runs: unless Enabled is false.
func (c *CleanupConfig) On() bool { return c.Enabled == nil || *c.Enabled }

func (c *CleanupConfig) setDefaults() {
	setDuration(&c.Grace, time.Hour)
	setDuration(&c.Interval, 30*time.Second)
	if c.PressureAt == 0 {
		c.PressureAt = 0.5
	}
	setDuration(&c.PressureGrace, 2*time.Second)
	setInt64(&c.AuditMaxBytes, 1<<30)
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
	}{{path + "grace", c.Grace}, {path + "pressure_grace", c.PressureGrace}, {path + "interval", c.Interval}, {path + "audit_retention", c.AuditRetention}} {
		if d.v <= 0 {
			p.add(d.path, "must be positive")
		}
	}
	p.inRange(path+"max_per_pass", c.MaxPerPass, 1, 1_000_000)
	if c.PressureAt <= 0 || c.PressureAt > 1 {
		p.add(path+"pressure_at", "must be in (0, 1], a fraction of the origin stream's limits, got %g", c.PressureAt)
	}
	if c.AuditMaxBytes < -1 || c.AuditMaxBytes == 0 {
		p.add(path+"audit_max_bytes", "must be positive, or -1 for no limit but audit_retention, got %d", c.AuditMaxBytes)
	}
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

// lint reports the cleanup settings that let L1's origin stream (of
// maxStreamBytes) or its audit stream fill for good.
func (c *CleanupConfig) lint(maxStreamBytes int64) []Warning {
	const path = "completion.cleanup."
	var out []Warning
	if !c.On() {
		out = append(out, Warning{path + "enabled", fmt.Sprintf(
			"false: the origin stream keeps every event, done or not, until jetstream.max_stream_bytes (%d), and then refuses every publish; leave the cleanup on unless the stream's limits are the retention you want",
			maxStreamBytes)})
		return out
	}
	if c.PressureAt > 0.9 {
		out = append(out, Warning{path + "pressure_at", fmt.Sprintf(
			"%g leaves the cleanup less than a tenth of the origin stream to make room in before it refuses publishes; keep it at 0.5 or lower",
			c.PressureAt)})
	}
	if c.AuditMaxBytes < 0 {
		out = append(out, Warning{path + "audit_max_bytes", fmt.Sprintf(
			"-1: the audit stream keeps %s of records whatever their size, and one full under the server's limits stops the deletes that keep the origin stream taking events; give it a byte limit",
			c.AuditRetention.D())})
	}
	return out
}
