package topology

import (
	"testing"
	"time"
)

func TestConfig_Validate_Bad(t *testing.T) {
	tests := []struct {
		name   string
		site   string // example config to start from; "" means edge1
		mutate func(*Config)
		path   string
		msg    string
	}{
		{"missing topology", "", func(c *Config) { c.TopologyFile = "" }, "topology", "required"},
		{"missing site", "", func(c *Config) { c.Site = "" }, "site", "required"},
		{"missing data_dir", "", func(c *Config) { c.DataDir = "" }, "data_dir", "required"},
		{"unknown site", "", func(c *Config) { c.Site = "edge3" }, "site", `unknown site "edge3"; the topology has l1, hub, edge1, edge2`},
		{"memory limit negative", "", func(c *Config) { c.MemoryLimitBytes = -2 }, "memory_limit_bytes", "must be 0 (the role's default), -1 (none) or at least 67108864 (64 MiB), got -2"},
		{"memory limit tiny", "", func(c *Config) { c.MemoryLimitBytes = 1 << 20 }, "memory_limit_bytes", "got 1048576"},
		{"ops remote", "", func(c *Config) { c.Ops.Listen = "0.0.0.0:18224" }, "ops.listen", "not a loopback address; set ops.allow_remote"},
		{"ops every interface", "", func(c *Config) { c.Ops.Listen = ":18224" }, "ops.listen", "empty host"},
		{"ops no port", "", func(c *Config) { c.Ops.Listen = "localhost" }, "ops.listen", "not host:port"},
		{"nats port", "", func(c *Config) { c.NATS.Listen = "127.0.0.1:99999" }, "nats.listen", "0..65535"},
		{"nats named port", "", func(c *Config) { c.NATS.Listen = "127.0.0.1:nats" }, "nats.listen", "must be a number"},
		{"ops on the nats port", "", func(c *Config) { c.Ops.Listen = c.NATS.Listen }, "ops.listen", "is the address of nats.listen as well"},
		{"nats on the leafnode port", "hub", func(c *Config) { c.NATS.Listen = "0.0.0.0:17423" }, "sites[hub].leafnode.listen", "is the address of nats.listen as well"},
		{"sync interval word", "", func(c *Config) { c.JetStream.SyncInterval = "sometimes" }, "jetstream.sync_interval", `"always" or a duration`},
		{"sync interval long", "", func(c *Config) { c.JetStream.SyncInterval = "11m" }, "jetstream.sync_interval", "(0s, 10m]"},
		{"max stream bytes negative", "", func(c *Config) { c.JetStream.MaxStreamBytes = -1 }, "jetstream.max_stream_bytes", "must be positive"},
		{"ping interval too short", "", func(c *Config) { c.Leafnode.PingInterval = Duration(100 * time.Millisecond) }, "leafnode.ping_interval", "at least 1s"},
		{"max stream above store", "", func(c *Config) { c.JetStream.MaxStoreBytes = 1000 }, "jetstream.max_stream_bytes", "above jetstream.max_store_bytes"},
		{"max store negative", "", func(c *Config) { c.JetStream.MaxStoreBytes = -1 }, "jetstream.max_store_bytes", "0 (no cap)"},
		{"upstream url scheme", "", func(c *Config) { c.Leafnode.UpstreamURL = "https://hub:443" }, "leafnode.upstream_url", `scheme "https"`},
		{"upstream url on l1", "l1", func(c *Config) { c.Leafnode.UpstreamURL = "nats-leaf://x:1" }, "leafnode.upstream_url", "no upstream to dial"},
		{"sink type", "", func(c *Config) { c.Sink.Type = "s3" }, "sink.type", `"s3" is not one of store, file`},
		{"file sink on hub", "hub", func(c *Config) { c.Sink.Type = "file" }, "sink.type", "only edge sites have a sink"},
		{"event id both", "", func(c *Config) { c.EventID.JSONField = "id" }, "event_id", "not both"},
		{"event id header", "", func(c *Config) { c.EventID.Header = "Nats Msg Id" }, "event_id.header", `contains " "`},
		{"event id length", "", func(c *Config) { c.EventID.MaxLength = 513 }, "event_id.max_length", "513 is outside 1..512"},
		{"ack_next", "", func(c *Config) { c.Delivery.AckPolicy = "ack_next" }, "delivery.ack_policy", "ack_next couples fetching to ACK and has no confirmed form; leafline ACKs only after the sink commit and receipt PubAck"},
		{"ack none", "", func(c *Config) { c.Delivery.AckPolicy = "none" }, "delivery.ack_policy", "event is lost"},
		{"ack all", "", func(c *Config) { c.Delivery.AckPolicy = "all" }, "delivery.ack_policy", "every earlier message"},
		{"ack early", "", func(c *Config) { c.Delivery.AckPolicy = "early" }, "delivery.ack_policy", `"early" would ACK before the work is durable`},
		{"consumer name", "", func(c *Config) { c.Delivery.Consumer = "sink.1" }, "delivery.consumer", `contains "."`},
		{"batch size", "", func(c *Config) { c.Delivery.BatchSize = 1001 }, "delivery.batch_size", "1001 is outside 1..1000"},
		{"backlog batch below batch", "", func(c *Config) { c.Delivery.BacklogBatchSize = 100 }, "delivery.backlog_batch_size", "100 is outside delivery.batch_size..1000 (256..1000)"},
		{"backlog batch above 1000", "", func(c *Config) { c.Delivery.BacklogBatchSize = 1001 }, "delivery.backlog_batch_size", "1001 is outside"},
		{"batch timeout", "", func(c *Config) { c.Delivery.BatchTimeoutMS = 60001 }, "delivery.batch_timeout_ms", "outside 1..60000"},
		{"ack wait short", "", func(c *Config) { c.Delivery.AckWait = Duration(500 * time.Millisecond) }, "delivery.ack_wait", "500ms is outside 1s..1h"},
		{"ack wait long", "", func(c *Config) { c.Delivery.AckWait = Duration(2 * time.Hour) }, "delivery.ack_wait", "outside 1s..1h"},
		{"max ack pending below batch", "", func(c *Config) { c.Delivery.MaxAckPending = 100 }, "delivery.max_ack_pending", "below delivery.batch_size (256)"},
		{"max ack pending huge", "", func(c *Config) { c.Delivery.MaxAckPending = 2_000_000 }, "delivery.max_ack_pending", "outside 1..1000000"},
		{"max deliver negative", "", func(c *Config) { c.Delivery.MaxDeliver = -1 }, "delivery.max_deliver", "0 (unlimited) or at least 1"},
		{"max deliver action", "", func(c *Config) { c.Delivery.MaxDeliverAction = "drop" }, "delivery.max_deliver_action", "not one of dead_letter, leave"},
		{"max deliver dead letter off", "", func(c *Config) {
			c.Delivery.MaxDeliverAction, c.DeadLetter.Enabled = "dead_letter", false
		}, "delivery.max_deliver_action", "requires dead_letter.enabled"},
		{"max message bytes", "", func(c *Config) { c.Delivery.MaxMessageBytes = 65 << 20 }, "delivery.max_message_bytes", "outside 1..67108864"},
		{"max retries", "", func(c *Config) { c.Delivery.Retry.MaxRetries = 101 }, "delivery.retry.max_retries", "outside 0..100"},
		{"backoff negative", "", func(c *Config) { c.Delivery.Retry.BackoffMS = -5 }, "delivery.retry.backoff_ms", "-5 is outside 1..3600000"},
		{"backoff max below base", "", func(c *Config) { c.Delivery.Retry.BackoffMaxMS = 500 }, "delivery.retry.backoff_max_ms", "below delivery.retry.backoff_ms (1000)"},
		{"backoff max huge", "", func(c *Config) { c.Delivery.Retry.BackoffMaxMS = 86_400_001 }, "delivery.retry.backoff_max_ms", "outside 1..86400000"},
		{"retry mode", "", func(c *Config) { c.Delivery.Retry.Mode = "random" }, "delivery.retry.mode", "not one of fixed, linear, exponential"},
		{"retry jitter", "", func(c *Config) { c.Delivery.Retry.Jitter = "some" }, "delivery.retry.jitter", "not one of none, full, equal"},
		{"temporary failure action", "", func(c *Config) { c.Delivery.Retry.TemporaryFailureAction = "term" }, "delivery.retry.temporary_failure_action", "not one of nak, leave_unacked"},
		{"ack confirmation timeout", "", func(c *Config) { c.Delivery.AckConfirmation.TimeoutMS = 60001 }, "delivery.ack_confirmation.timeout_ms", "outside 1..60000"},
		{"ack confirmation unsupported", "", func(c *Config) { c.Delivery.AckConfirmation.UnsupportedAction = "retry" }, "delivery.ack_confirmation.unsupported_action", "not one of fail, standard_ack"},
		{"in progress too slow", "", func(c *Config) { c.Delivery.InProgress.IntervalMS = 24000 }, "delivery.in_progress.interval_ms", "below 80% of delivery.ack_wait (30s)"},
		{"in progress negative", "", func(c *Config) { c.Delivery.InProgress.IntervalMS = -1 }, "delivery.in_progress.interval_ms", "must be 0"},
		{"dlq subject wildcard", "", func(c *Config) { c.DeadLetter.Subject = "leafline.dlq.*" }, "dead_letter.subject", "must be literal"},
		{"dlq subject in events", "", func(c *Config) { c.DeadLetter.Subject = "events.dlq" }, "dead_letter.subject", `overlaps the event subject "events.>" (events.subjects[0])`},
		{"dlq subject in receipts", "", func(c *Config) { c.DeadLetter.Subject = "leafline.receipts.edge1.dlq" }, "dead_letter.subject", "overlaps the receipt subjects"},
		{"dlq stream name", "", func(c *Config) { c.DeadLetter.Stream = "D.L.Q" }, "dead_letter.stream", `contains "."`},
		{"dlq stream is topology's", "", func(c *Config) { c.DeadLetter.Stream = "L2A" }, "dead_letter.stream", "already used by the topology's events.edge_stream"},
		{"outbox relay", "", func(c *Config) { c.Outbox.RelayInterval = -1 }, "outbox.relay_interval", `duration "-1ns" is negative`},
		{"completion bucket", "l1", func(c *Config) { c.Completion.Bucket = "a.b" }, "completion.bucket", `contains "."`},
		{"quarantine stream is topology's", "l1", func(c *Config) { c.Completion.QuarantineStream = "R1" }, "completion.quarantine_stream", "receipts.l1_stream"},
		{"quarantine subject in receipts", "l1", func(c *Config) { c.Completion.QuarantineSubject = "leafline.receipts" }, "completion.quarantine_subject", "overlaps the receipt subjects"},
		{"completion history too high", "l1", func(c *Config) { c.Completion.History = 65 }, "completion.history", "must be 1..64 (revisions kept per key in the completion bucket), got 65"},
		{"completion history negative", "l1", func(c *Config) { c.Completion.History = -1 }, "completion.history", "must be 1..64"},
		{"hold for too short", "l1", func(c *Config) { c.Completion.HoldFor = Duration(time.Millisecond) }, "completion.hold_for", "must be at least 1s, got 1ms"},
		{"held max per site", "l1", func(c *Config) { c.Completion.HeldMaxPerSite = -2 }, "completion.held_max_per_site", "must be -1 (no bound) or at least 1, got -2"},
		{"held max bytes per site", "l1", func(c *Config) { c.Completion.HeldMaxBytesPerSite = 1000 }, "completion.held_max_bytes_per_site", "must be -1 (no bound) or at least 65536 (64 KiB), got 1000"},
		{"cleanup grace", "l1", func(c *Config) { c.Completion.Cleanup.Grace = -1 }, "completion.cleanup.grace", "negative"},
		{"cleanup pressure at", "l1", func(c *Config) { c.Completion.Cleanup.PressureAt = 1.5 }, "completion.cleanup.pressure_at", "must be in (0, 1], a fraction of the origin stream's limits, got 1.5"},
		{"cleanup pressure grace", "l1", func(c *Config) { c.Completion.Cleanup.PressureGrace = -1 }, "completion.cleanup.pressure_grace", "negative"},
		{"cleanup audit max bytes", "l1", func(c *Config) { c.Completion.Cleanup.AuditMaxBytes = -2 }, "completion.cleanup.audit_max_bytes", "must be positive, or -1 for no limit but audit_retention, got -2"},
		{"cleanup max per pass", "l1", func(c *Config) { c.Completion.Cleanup.MaxPerPass = 1_000_001 }, "completion.cleanup.max_per_pass", "outside 1..1000000"},
		{"cleanup audit stream name", "l1", func(c *Config) { c.Completion.Cleanup.AuditStream = "A.B" }, "completion.cleanup.audit_stream", `contains "."`},
		{"cleanup audit stream is topology's", "l1", func(c *Config) { c.Completion.Cleanup.AuditStream = "R1" }, "completion.cleanup.audit_stream", "receipts.l1_stream"},
		{"cleanup audit stream is quarantine", "l1", func(c *Config) { c.Completion.Cleanup.AuditStream = "RQ" }, "completion.cleanup.audit_stream", "already completion.quarantine_stream"},
		{"cleanup audit subject wildcard", "l1", func(c *Config) { c.Completion.Cleanup.AuditSubject = "audit.*" }, "completion.cleanup.audit_subject", "must be literal"},
		{"cleanup audit subject in events", "l1", func(c *Config) { c.Completion.Cleanup.AuditSubject = "events.audit" }, "completion.cleanup.audit_subject", "overlaps the event subject"},
		{"cleanup audit subject in quarantine", "l1", func(c *Config) { c.Completion.Cleanup.AuditSubject = "leafline.quarantine.x" }, "completion.cleanup.audit_subject", "overlaps completion.quarantine_subject"},
		{"cleanup audit subject reserved", "l1", func(c *Config) { c.Completion.Cleanup.AuditSubject = "$JS.audit" }, "completion.cleanup.audit_subject", "reserved"},
		{"log level", "", func(c *Config) { c.Log.Level = "verbose" }, "log.level", `"verbose" is not one of debug, info, warn, error`},
		{"log format", "", func(c *Config) { c.Log.Format = "xml" }, "log.format", "not one of text, json"},
	}
	topo := mustMarshal(t, exampleTopology(t))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			site := tt.site
			if site == "" {
				site = "edge1"
			}
			c := exampleConfig(t, site)
			tt.mutate(c)
			path := writeBox(t, topo, mustMarshal(t, c))
			_, err := LoadConfig(path)
			wantProblem(t, err, path, tt.path, tt.msg)
		})
	}
}

func TestConfig_Validate_Good(t *testing.T) {
	tests := []struct {
		name   string
		site   string
		mutate func(*Config)
	}{
		{"ops remote allowed", "edge1", func(c *Config) { c.Ops.Listen, c.Ops.AllowRemote = "0.0.0.0:18224", true }},
		{"ops localhost", "edge1", func(c *Config) { c.Ops.Listen = "localhost:0" }},
		{"ops ipv6 loopback", "edge1", func(c *Config) { c.Ops.Listen = "[::1]:8222" }},
		{"sync interval duration", "edge1", func(c *Config) { c.JetStream.SyncInterval = "2m" }},
		{"json field event id", "edge1", func(c *Config) { c.EventID = EventIDConfig{JSONField: "id"} }},
		{"max deliver dead letter", "edge1", func(c *Config) { c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 5, "dead_letter" }},
		{"default sink on l1", "l1", func(c *Config) { c.Sink.Type = "store" }},
		{"edge settings ignored on hub", "hub", func(c *Config) { c.Delivery.BatchSize = 16 }},
		{"upstream url override", "edge1", func(c *Config) { c.Leafnode.UpstreamURL = "tls://proxy.local:7422" }},
		{"completion history max", "l1", func(c *Config) { c.Completion.History = 64 }},
		{"held receipts unbounded", "l1", func(c *Config) { c.Completion.HeldMaxPerSite, c.Completion.HeldMaxBytesPerSite = -1, -1 }},
		{"cleanup settings", "l1", func(c *Config) {
			c.Completion.Cleanup = CleanupConfig{Grace: Duration(time.Minute), AllowDeadLettered: true, MaxPerPass: 1,
				PressureAt: 0.9, PressureGrace: Duration(time.Second), AuditMaxBytes: -1}
		}},
		{"cleanup off", "l1", func(c *Config) { off := false; c.Completion.Cleanup.Enabled = &off }},
	}
	topo := mustMarshal(t, exampleTopology(t))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := exampleConfig(t, tt.site)
			tt.mutate(c)
			if _, err := LoadConfig(writeBox(t, topo, mustMarshal(t, c))); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestParseConfig_LocalOnly: ParseConfig checks no topology rule.
func TestParseConfig_LocalOnly(t *testing.T) {
	c := exampleConfig(t, "hub")
	c.Site = "nowhere"
	c.Sink.Type = "file"
	got, err := ParseConfig(mustMarshal(t, c), "hub.json")
	if err != nil {
		t.Fatal(err)
	}
	if got.Topology != nil || got.Source != "hub.json" || got.Delivery.BatchSize != 256 {
		t.Fatalf("got Topology=%v Source=%q BatchSize=%d", got.Topology, got.Source, got.Delivery.BatchSize)
	}
	_, err = ParseConfig([]byte(`{"site": "a b"}`), "box.json")
	wantProblem(t, err, "box.json", "topology", "required")
	wantProblem(t, err, "box.json", "site", `contains " "`)
	wantProblem(t, err, "box.json", "data_dir", "required")
}

func TestDefaultMemoryLimit(t *testing.T) {
	for role, want := range map[Role]int64{RoleEdge: DefaultEdgeMemoryLimit, RoleHub: DefaultHubMemoryLimit, RoleL1: DefaultL1MemoryLimit, "": 0} {
		c := Config{Site: "box", Topology: &Topology{}}
		if role != "" {
			c.Topology.Sites = []Site{{Name: "box", Role: role}}
		}
		if got := DefaultMemoryLimit(c.Role()); got != want {
			t.Errorf("role %q: default memory limit %d, want %d", role, got, want)
		}
	}
}
