package topology

import (
	"fmt"
	"strconv"
	"time"
)

// Warning is one lint finding: a configuration that is valid but risky,
// with the reason.
type Warning struct {
	// Path locates the setting, like a Problem's.
	Path string
	// Msg says what is risky and why.
	Msg string
}

// String formats the warning as "<path>: <msg>".
func (w Warning) String() string {
	if w.Path == "" {
		return w.Msg
	}
	return w.Path + ": " + w.Msg
}

// minSmoothStreamBytes is the smallest max_stream_bytes Lint accepts
// quietly (see the warning).
const minSmoothStreamBytes = 64 << 20

// RelayMinAge is how long a receipt stays pending before the edge's outbox
// relay republishes it: the box passes it as outbox.RelayConfig.MinAge,
// and Lint weighs the receipts duplicate window against it.
const RelayMinAge = 2 * time.Second

// OutboxLimit32 is the size an edge's outbox file may not grow past where
// pointers are 32 bits wide: outbox.MaxSize32, the bound the outbox sets
// there because bbolt maps the whole file into an address space of 2 to 3
// GiB. (topology imports no other package of ours; a test in edge holds
// the two equal.)
const OutboxLimit32 = 1 << 30

// Assumptions of the 32-bit lint, stated in its warnings.
const (
	// lintEventRate is the sustained rate, in events per second, that the
	// lint assumes an edge may see.
	lintEventRate = 10
	// receiptFileBytes is the outbox file space one published receipt
	// takes: the signed receipt, its index entries, and bbolt pages that
	// random keys leave partly empty.
	receiptFileBytes = 1536
	// storedEventFileBytes is the file space the store sink takes for an
	// event of 1 KiB: the payload base64-encoded in JSON, its key, and
	// partly empty pages.
	storedEventFileBytes = 3072
)

// Lint reports the risky settings of a loaded box config and of its
// topology (see Topology.Lint). Call it after LoadConfig: it assumes
// defaults are filled and the config is valid.
func Lint(c *Config) []Warning {
	return lint(c, strconv.IntSize == 32)
}

// lint is Lint, with the platform's pointer width given: addr32 adds the
// outbox's address-space warnings (lintAddressSpace).
func lint(c *Config, addr32 bool) []Warning {
	var out []Warning
	if c.Topology != nil {
		out = append(out, c.Topology.Lint()...)
	}
	if !c.JetStream.Durable() {
		out = append(out, Warning{"jetstream.sync_interval", fmt.Sprintf(
			"%s: a PubAck then means the page cache, and a power cut can lose acknowledged events and receipts; use \"always\"", c.JetStream.SyncInterval)})
	}
	if b := c.JetStream.MaxStreamBytes; b > 0 && b < minSmoothStreamBytes {
		out = append(out, Warning{"jetstream.max_stream_bytes", fmt.Sprintf(
			"%d is below %d (64 MiB): a next hop ACKs what it stored with its flow-control replies, once 1 to 16 MiB are in flight or after a second idle, and a stream can only be trimmed up to those ACKs; a smaller stream fills before them and its link moves in bursts of one stream a second",
			b, int64(minSmoothStreamBytes))})
	}
	site, isSite := (*Site)(nil), false
	if c.Topology != nil {
		site, isSite = c.Topology.Site(c.Site)
	}
	if isSite && site.Role == RoleEdge {
		if w, need := c.Topology.Receipts.DuplicateWindow.D(), c.Outbox.PublishTimeout.D()+RelayMinAge; w < need {
			out = append(out, Warning{"receipts.duplicate_window", fmt.Sprintf(
				"%s is shorter than outbox.publish_timeout + %s (%s): the relay's republish of a receipt whose PubAck is slow can pass the window, and L1 then counts a duplicate; raise the window (it costs memory at the edge) or lower publish_timeout",
				w, RelayMinAge, need)})
		}
		d := c.Delivery
		if w := c.Sink.WorstWrite.D(); w > 0 && !d.InProgress.Enabled {
			if need := time.Duration(d.BacklogBatchSize) * w; d.AckWait.D() < need {
				out = append(out, Warning{"delivery.ack_wait", fmt.Sprintf(
					"%s is shorter than delivery.backlog_batch_size × sink.worst_write (%d × %s = %s): a slow batch is redelivered while it is still being written, and each redelivery writes it again; raise ack_wait, lower the batch sizes, or enable delivery.in_progress",
					d.AckWait.D(), d.BacklogBatchSize, w, need)})
			}
		}
		if addr32 {
			out = append(out, lintAddressSpace(c)...)
		}
	}
	return out
}

// lintAddressSpace reports what could fill an edge's outbox file past
// OutboxLimit32 on a 32-bit platform, where the box then stops processing
// (outbox.ErrFull): the store sink, which never deletes an event, and a
// retention that keeps more receipts than fit at lintEventRate.
func lintAddressSpace(c *Config) []Warning {
	const limitMiB = OutboxLimit32 >> 20
	var out []Warning
	if c.Sink.Type == "store" {
		out = append(out, Warning{"sink.type", fmt.Sprintf(
			"%q keeps every event in the outbox file (bucket \"events\") and never deletes one; on this 32-bit platform the file may not grow past %d MiB (bbolt maps all of it into an address space of 2 to 3 GiB), about %d events of 1 KiB at %d bytes of file each, and the box then stops processing; use the file sink or a sink outside the box",
			c.Sink.Type, limitMiB, OutboxLimit32/storedEventFileBytes, storedEventFileBytes)})
	}
	keep := c.Outbox.Retention.D()
	if need := keep.Seconds() * lintEventRate * receiptFileBytes; need > OutboxLimit32 {
		fit := time.Duration(OutboxLimit32/(lintEventRate*receiptFileBytes)) * time.Second
		out = append(out, Warning{"outbox.retention", fmt.Sprintf(
			"%s keeps every published receipt that long: at %d events/s and about %d bytes of outbox file per receipt that is %.0f MiB, more than the %d MiB the file may grow to on this 32-bit platform (bbolt maps all of it into an address space of 2 to 3 GiB), and the box then stops processing; lower it to %s or less, or to %d MiB ÷ (the box's own rate × %d bytes)",
			keep, lintEventRate, receiptFileBytes, need/(1<<20), limitMiB, fit.Truncate(time.Hour), limitMiB, receiptFileBytes)})
	}
	return out
}

// Lint reports the risky settings of a topology that Validate accepts:
//   - a leafnode link without TLS, or without credentials (anything that
//     reaches the upstream's leafnode port then joins its account with
//     full access);
//   - a duplicate window shorter than the expected outage;
//   - an edge in direct delivery mode (it stops while a link is down).
func (t *Topology) Lint() []Warning {
	var out []Warning
	for i := range t.Sites {
		s := &t.Sites[i]
		up, ok := t.Site(s.Upstream)
		if !ok {
			continue
		}
		path := fieldPath(elemPath("sites", i), "leafnode")
		if up.Leafnode.TLS == TLSOff || up.Leafnode.TLS == "" {
			out = append(out, Warning{path, fmt.Sprintf(
				"the link %s → %s is not encrypted (site %q listens with tls %q): events and receipts cross it in clear text; set its leafnode.tls to %q",
				s.Name, up.Name, up.Name, TLSOff, TLSMutual)})
		}
		if s.Direct() {
			out = append(out, Warning{sitePath(i, "delivery_mode"), fmt.Sprintf(
				"edge %q consumes %s on L1 directly: it processes nothing while its link or the hub's link to L1 is down (a sourced edge goes on with its own copy), and every fetch and ACK crosses both links; use it where the links are reliable and the ACK must be on L1's own delivery",
				s.Name, t.Events.OriginStream)})
		}
		if s.Leafnode.Auth.Method == AuthNone || s.Leafnode.Auth.Method == "" {
			out = append(out, Warning{sitePath(i, "leafnode", "auth", "method"), fmt.Sprintf(
				"site %q dials %q without credentials: %q then accepts any leafnode, with full access to every stream and API of its account; give each site an nkey (`leafline topology certs`)",
				s.Name, up.Name, up.Name)})
		}
	}
	out = append(out, t.lintReceiptSigning()...) // lint_identity.go
	if w, o := t.Events.DuplicateWindow.D(), t.ExpectedOutage.D(); w < o {
		out = append(out, Warning{"events.duplicate_window", fmt.Sprintf(
			"%s is shorter than expected_outage (%s): an event that a publisher retries after a cut that long is stored twice in %s and processed twice at the edges (their outboxes absorb it; L1's completion store counts the duplicate). Raise the window (it costs one entry per message in it) or declare a shorter expected_outage",
			w, o, t.Events.OriginStream)})
	}
	return out
}

// Stream kinds for LintStreams.
const (
	StreamOrigin   = "origin"   // the events stream at L1
	StreamEvents   = "events"   // a sourced events stream (hub, edge)
	StreamReceipts = "receipts" // a receipts stream (edge, hub, L1)
	StreamDLQ      = "dlq"      // an edge's dead-letter stream
)

// StreamFacts describe one stream for LintStreams: from leafline's own plan,
// or read from a live server whose streams an operator manages.
type StreamFacts struct {
	Name string
	// Kind is one of the Stream* constants.
	Kind string
	// Retention is "limits", "interest" or "workqueue".
	Retention string
	// Discard is "old" or "new".
	Discard string
	// Subjects are the stream's own subjects.
	Subjects []string
	Sources  []SourceFacts
}

// SourceFacts describe one source of a stream.
type SourceFacts struct {
	// Name is the sourced stream.
	Name string
	// Durable: the source binds to a durable consumer (StreamSource.Consumer).
	Durable bool
	// External: the source is in another JetStream domain, across a
	// leafnode link that can be cut.
	External bool
}

// LintStreams reports streams that can lose or mis-route what leafline
// relies on; consumed are the subjects the site's processing consumes (an
// edge's filter, or the event subjects).
func LintStreams(streams []StreamFacts, consumed []string) []Warning {
	var out []Warning
	for _, s := range streams {
		path := "stream " + s.Name
		for _, src := range s.Sources {
			if src.External && !src.Durable {
				out = append(out, Warning{path, fmt.Sprintf(
					"sources %s across a link without durable sourcing: after a long cut an ephemeral source takes tens of seconds to resume (a consumer-create request sent during the cut blocks it); bind it to a durable consumer (StreamSource.Consumer)", src.Name)})
			}
		}
		switch s.Kind {
		case StreamReceipts, StreamDLQ:
			if s.Discard == "old" {
				out = append(out, Warning{path, fmt.Sprintf(
					"%s stream with DiscardOld: when it is full, the oldest records are deleted silently, before they reach L1; use DiscardNew, so that publishes fail and the edge holds its ACKs", s.Kind)})
			}
			for _, subj := range s.Subjects {
				for _, c := range consumed {
					if checkSubject(subj, true) == nil && checkSubject(c, true) == nil && subjectsOverlap(subj, c) {
						out = append(out, Warning{path, fmt.Sprintf(
							"%s subject %q overlaps the consumed subject %q: records would be fed back to the sink as events", s.Kind, subj, c)})
					}
				}
			}
		case StreamOrigin:
			switch s.Retention {
			case "workqueue", "interest":
				out = append(out, Warning{path, fmt.Sprintf(
					"origin stream with %s retention: the server deletes an event once its consumers have ACKed it (the hub's source ACKs on receipt), which says nothing about the edges; a receipt can then refer to an event no longer at L1, and a re-sourced hub cannot get it back. Use limits retention", s.Retention)})
			}
		}
	}
	return out
}
