package topology

import (
	"fmt"
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

// Lint reports the risky settings of a loaded box config and of its
// topology (see Topology.Lint). Call it after LoadConfig: it assumes
// defaults are filled and the config is valid.
func Lint(c *Config) []Warning {
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
	if isSite && site.Role == RoleHub {
		for _, e := range c.Topology.Downstream(site.Name) {
			if b, _ := c.Topology.SiteBacklog(e, c.JetStream.MaxStreamBytes); !e.Direct() && b >= c.JetStream.MaxStreamBytes {
				out = append(out, Warning{"jetstream.max_stream_bytes", fmt.Sprintf(
					"%d is not above edge %s's backlog budget (%d, topology backlog.max_bytes): while %s is away its events can fill this hub's events stream, which then takes nothing more for its other edges; give the edge a budget below the stream's limit",
					c.JetStream.MaxStreamBytes, e.Name, b, e.Name)})
			}
		}
	}
	if isSite && site.Role == RoleL1 {
		out = append(out, c.Completion.Cleanup.lint(c.JetStream.MaxStreamBytes)...)
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
