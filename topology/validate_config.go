package topology

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/leafline/leafline/topology/internal/syntax"
	"github.com/leafline/leafline/topology/subjects"
)

// Validate checks the box config and returns a *ValidationError listing
// every problem with its path, or nil. Call SetDefaults first. When
// Topology is set, Validate also checks the config against it (the site
// exists, role-specific rules, no clash with the topology's subjects and
// streams); it does not validate the topology itself (Topology.Validate does).
func (c *Config) Validate() error {
	var p problems
	c.validateLocal(&p)
	if c.Topology != nil {
		c.validateAgainst(&p, c.Topology)
	}
	return p.err(c.Source)
}

// validateLocal checks what can be checked without the topology.
func (c *Config) validateLocal(p *problems) {
	if c.TopologyFile == "" && c.Topology == nil {
		p.add("topology", "required: the path of the shared topology file")
	}
	p.name("site", c.Site, maxSiteName)
	if c.DataDir == "" {
		p.add("data_dir", "required")
	}
	if m := c.MemoryLimitBytes; m < -1 || (m > 0 && m < minMemoryLimit) {
		p.add("memory_limit_bytes", "must be 0 (the role's default), -1 (none) or at least %d (64 MiB), got %d", minMemoryLimit, m)
	}
	c.validateListeners(p)
	c.validateJetStream(p)
	if c.Leafnode.ReconnectInterval <= 0 {
		p.add("leafnode.reconnect_interval", "must be positive")
	}
	if c.Leafnode.PingInterval < Duration(time.Second) {
		p.add("leafnode.ping_interval", "must be at least 1s")
	}
	if u := c.Leafnode.UpstreamURL; u != "" {
		if err := checkUpstreamURL(u); err != nil {
			p.add("leafnode.upstream_url", "%v", err)
		}
	}
	c.validateUpstreamURLs(p)
	c.Cluster.validate(p)
	c.validateLeafnodeSecurity(p)
	c.validateSink(p)
	c.validateEventID(p)
	c.Delivery.validate(p, c.DeadLetter.Enabled)
	c.validateDeadLetter(p)
	c.validateOutbox(p)
	c.validateCompletion(p)
	p.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	p.oneOf("log.format", c.Log.Format, "text", "json")
}

func (c *Config) validateListeners(p *problems) {
	if err := syntax.HostPort(c.NATS.Listen, 0, true); err != nil {
		p.add("nats.listen", "%v", err)
	} else {
		c.validateClientListener(p) // listener_auth.go
	}
	if err := syntax.HostPort(c.Ops.Listen, 0, true); err != nil {
		p.add("ops.listen", "%v", err)
		return
	}
	host, _, _ := net.SplitHostPort(c.Ops.Listen)
	if !c.Ops.AllowRemote && !syntax.IsLoopback(host) {
		what := fmt.Sprintf("host %q", host)
		if host == "" {
			what = "an empty host (every interface)"
		}
		p.add("ops.listen", "%s is not a loopback address; set ops.allow_remote to expose metrics and the status API beyond this machine", what)
	}
}

// minMemoryLimit is the smallest memory_limit_bytes accepted: below it the
// collector would run without pause while a box drains a backlog.
const minMemoryLimit = 64 << 20

func (c *Config) validateJetStream(p *problems) {
	j := c.JetStream
	if j.SyncInterval != "always" {
		d, err := time.ParseDuration(j.SyncInterval)
		if err != nil || d <= 0 || d > 10*time.Minute {
			p.add("jetstream.sync_interval", `must be "always" or a duration in (0s, 10m], got %q`, j.SyncInterval)
		}
	}
	if j.MaxStoreBytes < 0 {
		p.add("jetstream.max_store_bytes", "must be 0 (no cap) or positive, got %d", j.MaxStoreBytes)
	}
	switch {
	case j.MaxStreamBytes < 1:
		p.add("jetstream.max_stream_bytes", "must be positive, got %d", j.MaxStreamBytes)
	case j.MaxStoreBytes > 0 && j.MaxStreamBytes > j.MaxStoreBytes:
		p.add("jetstream.max_stream_bytes", "%d is above jetstream.max_store_bytes (%d)", j.MaxStreamBytes, j.MaxStoreBytes)
	}
}

func (c *Config) validateEventID(p *problems) {
	e := c.EventID
	switch {
	case e.Header != "" && e.JSONField != "":
		p.add("event_id", "set header or json_field, not both")
	case e.Header != "":
		if err := syntax.HeaderName(e.Header); err != nil {
			p.add("event_id.header", "%v", err)
		}
	case e.JSONField == "":
		p.add("event_id", "one of header or json_field is required")
	}
	p.inRange("event_id.max_length", e.MaxLength, 1, maxEventIDLen)
}

// ackPolicyRefusals says why each refused ack_policy is refused.
var ackPolicyRefusals = map[string]string{
	"none":     "none lets the server treat delivery as the ACK, so an event is lost if the sink or the receipt fails",
	"all":      "all ACKs every earlier message with one ACK, acknowledging events whose sink commit or receipt PubAck has not happened",
	"ack_next": "ack_next couples fetching to ACK and has no confirmed form",
	"explicit": "explicit alone does not say when to ACK",
}

func (d *DeliveryConfig) validate(p *problems, deadLetter bool) {
	if d.AckPolicy != AckPolicyAfterSinkCommit {
		why, ok := ackPolicyRefusals[d.AckPolicy]
		if !ok {
			why = fmt.Sprintf("%q would ACK before the work is durable", d.AckPolicy)
		}
		p.add("delivery.ack_policy", "%s; leafline ACKs only after the sink commit and receipt PubAck (want %q)", why, AckPolicyAfterSinkCommit)
	}
	p.name("delivery.consumer", d.Consumer, maxConsumerName)
	batchOK := p.inRange("delivery.batch_size", d.BatchSize, 1, maxBatchSize)
	if batchOK && (d.BacklogBatchSize < d.BatchSize || d.BacklogBatchSize > maxBatchSize) {
		p.add("delivery.backlog_batch_size", "%d is outside delivery.batch_size..%d (%d..%d)", d.BacklogBatchSize, maxBatchSize, d.BatchSize, maxBatchSize)
	}
	p.inRange("delivery.batch_timeout_ms", d.BatchTimeoutMS, 1, 60000)
	if w := d.AckWait.D(); w < time.Second || w > time.Hour {
		p.add("delivery.ack_wait", "%s is outside 1s..1h", w)
	}
	if p.inRange("delivery.max_ack_pending", d.MaxAckPending, 1, 1_000_000) && batchOK && d.MaxAckPending < d.BatchSize {
		p.add("delivery.max_ack_pending", "%d is below delivery.batch_size (%d): a full batch could never be fetched", d.MaxAckPending, d.BatchSize)
	}
	if d.MaxDeliver < 0 {
		p.add("delivery.max_deliver", "must be 0 (unlimited) or at least 1, got %d", d.MaxDeliver)
	}
	if p.oneOf("delivery.max_deliver_action", d.MaxDeliverAction, "dead_letter", "leave") &&
		d.MaxDeliverAction == "dead_letter" && !deadLetter {
		p.add("delivery.max_deliver_action", "dead_letter requires dead_letter.enabled")
	}
	p.inRange("delivery.max_message_bytes", d.MaxMessageBytes, 1, 64<<20)
	d.Retry.validate(p)
	a := d.AckConfirmation
	p.inRange("delivery.ack_confirmation.timeout_ms", a.TimeoutMS, 1, 60000)
	p.oneOf("delivery.ack_confirmation.unsupported_action", a.UnsupportedAction, "fail", "standard_ack")
	iv := d.InProgress.IntervalMS
	switch limit := 0.8 * float64(d.AckWait.D().Milliseconds()); {
	case iv < 0:
		p.add("delivery.in_progress.interval_ms", "must be 0 (ack_wait/3) or positive, got %d", iv)
	case iv > 0 && float64(iv) >= limit:
		p.add("delivery.in_progress.interval_ms", "%d must be below 80%% of delivery.ack_wait (%s)", iv, d.AckWait.D())
	}
}

func (r RetryConfig) validate(p *problems) {
	p.inRange("delivery.retry.max_retries", r.MaxRetries, 0, 100)
	baseOK := p.inRange("delivery.retry.backoff_ms", r.BackoffMS, 1, 3_600_000)
	if p.inRange("delivery.retry.backoff_max_ms", r.BackoffMaxMS, 1, 86_400_000) && baseOK && r.BackoffMaxMS < r.BackoffMS {
		p.add("delivery.retry.backoff_max_ms", "%d is below delivery.retry.backoff_ms (%d)", r.BackoffMaxMS, r.BackoffMS)
	}
	p.oneOf("delivery.retry.mode", r.Mode, "fixed", "linear", "exponential")
	p.oneOf("delivery.retry.jitter", r.Jitter, "none", "full", "equal")
	p.oneOf("delivery.retry.temporary_failure_action", r.TemporaryFailureAction, "nak", "leave_unacked")
}

func (c *Config) validateDeadLetter(p *problems) {
	d := c.DeadLetter
	if d.Subject != "" || c.Site != "" {
		if p.subject("dead_letter.subject", d.Subject, false) {
			p.notReserved("dead_letter.subject", d.Subject)
		}
	}
	p.name("dead_letter.stream", d.Stream, maxStreamName)
}

func (c *Config) validateOutbox(p *problems) {
	for _, d := range []struct {
		path string
		v    Duration
	}{
		{"outbox.relay_interval", c.Outbox.RelayInterval},
		{"outbox.publish_timeout", c.Outbox.PublishTimeout},
		{"outbox.retention", c.Outbox.Retention},
	} {
		if d.v <= 0 {
			p.add(d.path, "must be positive")
		}
	}
}

func (c *Config) validateCompletion(p *problems) {
	co := c.Completion
	p.name("completion.consumer", co.Consumer, maxConsumerName)
	p.name("completion.bucket", co.Bucket, maxConsumerName)
	p.name("completion.quarantine_stream", co.QuarantineStream, maxStreamName)
	if p.subject("completion.quarantine_subject", co.QuarantineSubject, false) {
		p.notReserved("completion.quarantine_subject", co.QuarantineSubject+".>")
	}
	if co.OverdueAfter <= 0 {
		p.add("completion.overdue_after", "must be positive")
	}
	if co.RedriveAfter <= 0 {
		p.add("completion.redrive_after", "must be positive")
	}
	if co.HoldFor < Duration(time.Second) {
		p.add("completion.hold_for", "must be at least 1s, got %s", co.HoldFor)
	}
	if co.HeldMaxPerSite < -1 || co.HeldMaxPerSite == 0 {
		p.add("completion.held_max_per_site", "must be -1 (no bound) or at least 1, got %d", co.HeldMaxPerSite)
	}
	if b := co.HeldMaxBytesPerSite; b != -1 && b < 64<<10 {
		p.add("completion.held_max_bytes_per_site", "must be -1 (no bound) or at least 65536 (64 KiB), got %d", b)
	}
	if co.History < 1 || co.History > 64 {
		p.add("completion.history", "must be 1..64 (revisions kept per key in the completion bucket), got %d", co.History)
	}
	co.Cleanup.validate(p)
}

// validateAgainst checks the config against the topology it belongs to.
func (c *Config) validateAgainst(p *problems, t *Topology) {
	if c.Site == "" {
		return // reported by validateLocal
	}
	s, ok := t.Site(c.Site)
	if !ok {
		var names []string
		for _, s := range t.Sites {
			names = append(names, s.Name)
		}
		p.add("site", "unknown site %q; the topology has %s", c.Site, strings.Join(names, ", "))
		return
	}
	if c.Leafnode.UpstreamURL != "" && s.Upstream == "" {
		p.add("leafnode.upstream_url", "site %q (%s) has no upstream to dial", s.Name, s.Role)
	}
	if len(c.Leafnode.UpstreamURLs) > 0 && s.Upstream == "" {
		p.add("leafnode.upstream_urls", "site %q (%s) has no upstream to dial", s.Name, s.Role)
	}
	c.validateClusterAgainst(p, t, s)
	c.checkListenerClash(p, s)
	c.validateSecurityAgainst(p, t, s)
	c.validateSigningAgainst(p, s)
	c.validateDirectAgainst(p, t, s)
	if w := t.Events.DuplicateWindow; s.Role == RoleL1 && c.Completion.RedriveAfter <= w {
		p.add("completion.redrive_after", "%s must exceed events.duplicate_window (%s): a copy published again inside the window is dropped as a duplicate", c.Completion.RedriveAfter, w)
	}
	if w := t.Receipts.DuplicateWindow; s.Role == RoleL1 && c.Completion.RedriveAfter <= w {
		p.add("completion.redrive_after", "%s must exceed receipts.duplicate_window (%s): the edge's receipt for a redriven event is dropped as a duplicate inside the window", c.Completion.RedriveAfter, w)
	}
	// Other edge-only settings are ignored on l1 and hub (one test harness
	// may configure every box alike), but a non-default sink says that the
	// operator expects this box to process events, which it never will.
	if s.Role != RoleEdge && c.Sink.Type != "" && c.Sink.Type != "store" {
		p.add("sink.type", "site %q is %s; only edge sites have a sink", s.Name, s.Role)
	}
	c.checkSubjectSpace(p, t, "dead_letter.subject", c.DeadLetter.Subject)
	c.checkSubjectSpace(p, t, "completion.quarantine_subject", c.Completion.QuarantineSubject+".>")
	c.Completion.Cleanup.validateAgainst(p, t, c)
	for _, ns := range []namedStream{
		{"dead_letter.stream", c.DeadLetter.Stream},
		{"completion.quarantine_stream", c.Completion.QuarantineStream},
	} {
		if user, ok := t.streamUser(ns.name); ok {
			p.add(ns.path, "stream name %q is already used by the topology's %s", ns.name, user)
		}
	}
}

// checkSubjectSpace reports a box subject (space) that overlaps the event
// subjects or the receipts subjects of t.
func (c *Config) checkSubjectSpace(p *problems, t *Topology, path, space string) {
	if subjects.Check(space, true) != nil {
		return // reported by validateLocal
	}
	for _, ev := range t.eventSubjects() {
		if subjects.Overlap(space, ev.name) {
			p.add(path, "overlaps the event subject %q (%s)", ev.name, ev.path)
		}
	}
	receipts := t.Receipts.SubjectPrefix + ".>"
	if subjects.Check(receipts, true) == nil && subjects.Overlap(space, receipts) {
		p.add(path, "overlaps the receipt subjects %q (receipts.subject_prefix)", receipts)
	}
}

// name records a problem if s is not a valid name; it reports validity.
func (p *problems) name(path, s string, max int) bool {
	if err := syntax.Name(s, max); err != nil {
		p.add(path, "%v", err)
		return false
	}
	return true
}

// subject records a problem if s is not a valid subject; it reports validity.
func (p *problems) subject(path, s string, wildcards bool) bool {
	if err := subjects.Check(s, wildcards); err != nil {
		p.add(path, "%v", err)
		return false
	}
	return true
}

// notReserved records a problem if the subject space s overlaps the
// subjects leafline reserves for stream sourcing or NATS reserves for itself.
func (p *problems) notReserved(path, s string) {
	switch {
	case strings.HasPrefix(s, "$"):
		p.add(path, "subjects starting with '$' are reserved for the NATS system")
	case subjects.Overlap(s, sourceDeliverSpace):
		p.add(path, "overlaps %q, which leafline reserves for stream sourcing", sourceDeliverSpace)
	case subjects.Overlap(s, directInboxSpace):
		p.add(path, "overlaps %q, which leafline reserves for the replies and deliveries of direct-mode edges", directInboxSpace)
	case subjects.Overlap(s, relaySpace):
		p.add(path, "overlaps %q, which leafline reserves for the relay transport", relaySpace)
	case subjects.Overlap(s, addressSpace):
		p.add(path, "overlaps %q, which leafline reserves for events sent again to one edge", addressSpace)
	}
}

// inRange records a problem if v is outside lo..hi; it reports validity.
func (p *problems) inRange(path string, v, lo, hi int) bool {
	if v < lo || v > hi {
		p.add(path, "%d is outside %d..%d", v, lo, hi)
		return false
	}
	return true
}

// oneOf records a problem if v is not one of allowed; it reports validity.
func (p *problems) oneOf(path, v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	p.add(path, "%q is not one of %s", v, strings.Join(allowed, ", "))
	return false
}

// validateDirectAgainst checks a direct-mode edge's delivery settings
// against the consumer that L1 creates for it (Site.DirectConsumer): the
// box cannot change that consumer, so a setting of its own that differs
// would have no effect, or would contradict it.
func (c *Config) validateDirectAgainst(p *problems, t *Topology, s *Site) {
	if !s.Direct() {
		return
	}
	i := slices.IndexFunc(t.Sites, func(o Site) bool { return o.Name == s.Name })
	where := "topology " + sitePath(i, "direct_consumer")
	dc, d := s.DirectConsumerSettings(), c.Delivery
	if d.AckWait != dc.AckWait {
		p.add("delivery.ack_wait", "%s is not the AckWait of this direct-mode edge's consumer, which L1 creates (%s.ack_wait: %s): set it there", d.AckWait, where, dc.AckWait)
	}
	if d.MaxAckPending != dc.MaxAckPending {
		p.add("delivery.max_ack_pending", "%d is not the MaxAckPending of this direct-mode edge's consumer, which L1 creates (%s.max_ack_pending: %d): set it there", d.MaxAckPending, where, dc.MaxAckPending)
	}
	switch {
	case d.MaxDeliverAction == "dead_letter" && dc.MaxDeliver > 0:
		p.add("delivery.max_deliver_action", "dead_letter needs the consumer that L1 creates for this direct-mode edge to deliver without limit (%s.max_deliver: 0), not stop after %d deliveries", where, dc.MaxDeliver)
	case d.MaxDeliverAction != "dead_letter" && d.MaxDeliver != dc.MaxDeliver:
		p.add("delivery.max_deliver", "%d is not the MaxDeliver of this direct-mode edge's consumer, which L1 creates (%s.max_deliver: %d): set it there", d.MaxDeliver, where, dc.MaxDeliver)
	}
}
