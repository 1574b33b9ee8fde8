package topology

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTopology_Validate_Bad(t *testing.T) {
	tests := []topologyCase{
		{"no sites", func(tp *Topology) { tp.Sites = []Site{} }, "sites", "at least one site"},
		{"no l1", func(tp *Topology) { tp.Sites = tp.Sites[1:] }, "sites", "no site has role l1"},
		{"second l1", func(tp *Topology) { tp.Sites[1].Role, tp.Sites[1].Upstream = RoleL1, "" }, "sites[1].role", "a second l1 site"},
		{"no hub", func(tp *Topology) { tp.Sites[1].Role = RoleEdge }, "sites", "no site has role hub"},
		{"no edge", func(tp *Topology) { tp.Sites = tp.Sites[:2] }, "sites", "no site has role edge"},
		{"unknown role", func(tp *Topology) { tp.Sites[3].Role = "leaf" }, "sites[3].role", `unknown role "leaf"`},
		{"missing role", func(tp *Topology) { tp.Sites[3].Role = "" }, "sites[3].role", "required"},
		{"unknown upstream", func(tp *Topology) { tp.Sites[2].Upstream = "hubb" }, "sites[2].upstream", `unknown site "hubb"`},
		{"edge dials l1", func(tp *Topology) { tp.Sites[2].Upstream = "l1" }, "sites[2].upstream", "must be a hub site"},
		{"hub dials hub", func(tp *Topology) {
			tp.Sites = append(tp.Sites, Site{Name: "hub2", Role: RoleHub, Upstream: "hub"})
		}, "sites[4].upstream", "must be an l1 site"},
		{"hub without upstream", func(tp *Topology) { tp.Sites[1].Upstream = "" }, "sites[1].upstream", "required"},
		{"l1 with upstream", func(tp *Topology) { tp.Sites[0].Upstream = "hub" }, "sites[0].upstream", "an l1 site has no upstream"},
		{"own upstream", func(tp *Topology) { tp.Sites[1].Upstream = "hub" }, "sites[1].upstream", "its own upstream"},
		{"cycle", func(tp *Topology) { tp.Sites[1].Upstream = "edge1" }, "sites[1].upstream", "cycle: hub → edge1 → hub"},
		{"empty name", func(tp *Topology) { tp.Sites[3].Name = "" }, "sites[3].name", "required"},
		{"dot in name", func(tp *Topology) { tp.Sites[3].Name = "edge.2" }, "sites[3].name", `contains "."`},
		{"space in name", func(tp *Topology) { tp.Sites[3].Name = "edge 2" }, "sites[3].name", `contains " "`},
		{"control char in name", func(tp *Topology) { tp.Sites[3].Name = "edge\x01" }, "sites[3].name", "only letters"},
		{"long name", func(tp *Topology) { tp.Sites[3].Name = strings.Repeat("e", 65) }, "sites[3].name", "at most 64"},
		{"wildcard domain", func(tp *Topology) { tp.Sites[3].Domain = "ed*" }, "sites[3].domain", `contains "*"`},
		{"duplicate name", func(tp *Topology) { tp.Sites[3].Name = "edge1" }, "sites[3].name", `duplicate site name "edge1" (also sites[2])`},
		{"duplicate domain", func(tp *Topology) { tp.Sites[3].Domain = "edge1" }, "sites[3].domain", "already the domain of sites[2]"},
		{"upstream without listen", func(tp *Topology) { tp.Sites[1].Leafnode.Listen = "" }, "sites[1].leafnode.listen", `required: site "edge1" dials this site`},
		{"listen port 0", func(tp *Topology) { tp.Sites[1].Leafnode.Listen = "127.0.0.1:0" }, "sites[1].leafnode.listen", "1..65535"},
		{"listen port too big", func(tp *Topology) { tp.Sites[0].Leafnode.Listen = "127.0.0.1:70000" }, "sites[0].leafnode.listen", "1..65535"},
		{"listen without port", func(tp *Topology) { tp.Sites[0].Leafnode.Listen = "127.0.0.1" }, "sites[0].leafnode.listen", "not host:port"},
		{"listen without host", func(tp *Topology) { tp.Sites[0].Leafnode.Listen = ":7422" }, "sites[0].leafnode.listen", "no host"},
		{"edge listens", func(tp *Topology) { tp.Sites[2].Leafnode.Listen = "127.0.0.1:7000" }, "sites[2].leafnode.listen", "accepts no leafnode"},
		{"url scheme", func(tp *Topology) { tp.Sites[2].Leafnode.UpstreamURL = "http://hub:7422" }, "sites[2].leafnode.upstream_url", `scheme "http"`},
		{"url without port", func(tp *Topology) { tp.Sites[2].Leafnode.UpstreamURL = "tls://hub" }, "sites[2].leafnode.upstream_url", "no port"},
		{"url without host", func(tp *Topology) { tp.Sites[2].Leafnode.UpstreamURL = "nats-leaf://:7422" }, "sites[2].leafnode.upstream_url", "no host"},
		{"url on l1", func(tp *Topology) { tp.Sites[0].Leafnode.UpstreamURL = "nats-leaf://x:1" }, "sites[0].leafnode.upstream_url", "dials no upstream"},
		{"filter on hub", func(tp *Topology) { tp.Sites[1].Filter = "events.>" }, "sites[1].filter", "only edge sites"},
		{"filter outside events", func(tp *Topology) { tp.Sites[2].Filter = "orders.>" }, "sites[2].filter", "not within the event subjects"},
		{"filter wider than events", func(tp *Topology) { tp.Sites[2].Filter = ">" }, "sites[2].filter", "not within"},
		{"filter invalid", func(tp *Topology) { tp.Sites[2].Filter = "events..a" }, "sites[2].filter", "empty token"},
		{"subject with space", func(tp *Topology) { tp.Events.Subjects = []string{"events.a b"} }, "events.subjects[0]", "whitespace"},
		{"subject > not last", func(tp *Topology) { tp.Events.Subjects = []string{"events.>.a"} }, "events.subjects[0]", "last token"},
		{"partial wildcard", func(tp *Topology) { tp.Events.Subjects = []string{"events.a*"} }, "events.subjects[0]", "whole tokens"},
		{"trailing dot", func(tp *Topology) { tp.Events.Subjects = []string{"events."} }, "events.subjects[0]", "empty token"},
		{"overlapping subjects", func(tp *Topology) { tp.Events.Subjects = []string{"events.>", "events.a"} }, "events.subjects[1]", "overlaps events.subjects[0]"},
		{"system subject", func(tp *Topology) { tp.Events.Subjects = []string{"$JS.x"} }, "events.subjects[0]", "reserved for the NATS system"},
		{"sourcing subject", func(tp *Topology) { tp.Events.Subjects = []string{"leafline.src.*.x"} }, "events.subjects[0]", "reserves for stream sourcing"},
		{"stream name dot", func(tp *Topology) { tp.Events.EdgeStream = "L2.A" }, "events.edge_stream", `contains "."`},
		{"stream name long", func(tp *Topology) { tp.Events.HubStream = strings.Repeat("H", 33) }, "events.hub_stream", "at most 32"},
		{"duplicate stream", func(tp *Topology) { tp.Receipts.HubStream = "HA" }, "receipts.hub_stream", "also used by events.hub_stream"},
		{"receipts wildcard", func(tp *Topology) { tp.Receipts.SubjectPrefix = "leafline.*" }, "receipts.subject_prefix", "must be literal"},
		{"receipts overlap events", func(tp *Topology) { tp.Receipts.SubjectPrefix = "events.receipts" }, "receipts.subject_prefix", "overlaps events.subjects[0]"},
		{"window short", func(tp *Topology) { tp.Events.DuplicateWindow = Duration(500e6) }, "events.duplicate_window", "500ms is outside 1s..24h"},
		{"window long", func(tp *Topology) { tp.Events.DuplicateWindow = Duration(25 * 3600e9) }, "events.duplicate_window", "outside 1s..24h"},
	}
	wantTopologyProblems(t, tests)
}

// TestTopology_Validate_AllProblemsAtOnce: five distinct problems in one
// file come back together, each on its own line.
func TestTopology_Validate_AllProblemsAtOnce(t *testing.T) {
	data := []byte(`{
  "events": {"edge_stream": "L2.A", "duplicate_window": "1ms"},
  "sites": [
    {"name": "l1", "role": "l1", "leafnode": {"listen": "127.0.0.1:17422"}},
    {"name": "hub", "role": "hub", "upstream": "l1", "leafnode": {"listen": "127.0.0.1:17423"}},
    {"name": "edge1", "role": "edge", "upstream": "hubb"},
    {"name": "edge1", "role": "edge", "upstream": "hub"},
    {"name": "edge3", "role": "leaf", "upstream": "hub"}
  ]
}`)
	_, err := ParseTopology(data, "topology.json")
	want := []string{
		`topology.json: events.edge_stream: "L2.A" contains "."; only letters, digits, '_' and '-' are allowed`,
		`topology.json: events.duplicate_window: 1ms is outside 1s..24h`,
		`topology.json: sites[4].role: unknown role "leaf"; want l1, hub or edge`,
		`topology.json: sites[3].name: duplicate site name "edge1" (also sites[2])`,
		`topology.json: sites[2].upstream: unknown site "hubb"`,
	}
	if got := problemsOf(t, err); len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(got), len(want), err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%v", len(lines), len(want), err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w+"\n") && !strings.HasSuffix(err.Error(), w) {
			t.Errorf("missing line %q in:\n%v", w, err)
		}
	}
}

func TestTopology_Validate_InMemory(t *testing.T) {
	tp := &Topology{Sites: []Site{
		{Name: "l1", Role: RoleL1, Leafnode: SiteLeafnode{Listen: "127.0.0.1:1"}},
		{Name: "hub", Role: RoleHub, Upstream: "l1", Leafnode: SiteLeafnode{Listen: "127.0.0.1:2"}},
		{Name: "edge1", Role: RoleEdge, Upstream: "hub"},
	}}
	tp.SetDefaults()
	if err := tp.Validate(); err != nil {
		t.Fatal(err)
	}
	err := (&Topology{}).Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Source != "" || !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero topology: got %#v", err)
	}
}

func TestTopology_Validate_MultipleSubjectsAndFilters(t *testing.T) {
	tp := exampleTopology(t)
	tp.Events.Subjects = []string{"events.>", "orders.*.created"}
	tp.Sites[2].Filter = "orders.eu.created"
	tp.Sites[3].Filter = "events.*.x"
	if _, err := ParseTopology(mustMarshal(t, tp), "t"); err != nil {
		t.Fatal(err)
	}
}

func TestConfig_SetDefaults(t *testing.T) {
	c := &Config{TopologyFile: "t.json", Site: "edge1", DataDir: "/d"}
	c.SetDefaults()
	checks := []struct {
		name      string
		got, want any
	}{
		{"nats.listen", c.NATS.Listen, "127.0.0.1:4222"},
		{"ops.listen", c.Ops.Listen, "127.0.0.1:8222"},
		{"jetstream.sync_interval", c.JetStream.SyncInterval, "always"},
		{"jetstream.max_stream_bytes", c.JetStream.MaxStreamBytes, int64(1 << 30)},
		{"leafnode.reconnect_interval", c.Leafnode.ReconnectInterval.String(), "1s"},
		{"leafnode.ping_interval", c.Leafnode.PingInterval.String(), "5s"},
		{"sink.type", c.Sink.Type, "store"},
		{"sink.dir", c.Sink.Dir, "/d/sink"},
		{"event_id.header", c.EventID.Header, "Nats-Msg-Id"},
		{"event_id.max_length", c.EventID.MaxLength, 512},
		{"delivery.ack_policy", c.Delivery.AckPolicy, "after_sink_commit"},
		{"delivery.consumer", c.Delivery.Consumer, "leafline-sink"},
		{"delivery.batch_size", c.Delivery.BatchSize, 256},
		{"delivery.backlog_batch_size", c.Delivery.BacklogBatchSize, 1000},
		{"delivery.batch_timeout_ms", c.Delivery.BatchTimeoutMS, 50},
		{"delivery.ack_wait", c.Delivery.AckWait.String(), "30s"},
		{"delivery.max_ack_pending", c.Delivery.MaxAckPending, 4096},
		{"delivery.max_deliver", c.Delivery.MaxDeliver, 0},
		{"delivery.max_deliver_action", c.Delivery.MaxDeliverAction, "leave"},
		{"delivery.max_message_bytes", c.Delivery.MaxMessageBytes, 1 << 20},
		{"delivery.retry.backoff_ms", c.Delivery.Retry.BackoffMS, 1000},
		{"delivery.retry.backoff_max_ms", c.Delivery.Retry.BackoffMaxMS, 60000},
		{"delivery.retry.mode", c.Delivery.Retry.Mode, "exponential"},
		{"delivery.retry.jitter", c.Delivery.Retry.Jitter, "equal"},
		{"delivery.retry.temporary_failure_action", c.Delivery.Retry.TemporaryFailureAction, "nak"},
		{"delivery.ack_confirmation.timeout_ms", c.Delivery.AckConfirmation.TimeoutMS, 1000},
		{"delivery.ack_confirmation.unsupported_action", c.Delivery.AckConfirmation.UnsupportedAction, "fail"},
		{"dead_letter.subject", c.DeadLetter.Subject, "leafline.dlq.edge1"},
		{"dead_letter.stream", c.DeadLetter.Stream, "DLQ"},
		{"outbox.relay_interval", c.Outbox.RelayInterval.String(), "1s"},
		{"outbox.publish_timeout", c.Outbox.PublishTimeout.String(), "5s"},
		{"outbox.retention", c.Outbox.Retention.String(), "168h0m0s"},
		{"completion.consumer", c.Completion.Consumer, "leafline-completion"},
		{"completion.bucket", c.Completion.Bucket, "leafline_completions"},
		{"completion.quarantine_stream", c.Completion.QuarantineStream, "RQ"},
		{"completion.quarantine_subject", c.Completion.QuarantineSubject, "leafline.quarantine"},
		{"completion.cleanup.audit_stream", c.Completion.Cleanup.AuditStream, "LEAFLINE_AUDIT"},
		{"completion.cleanup.audit_subject", c.Completion.Cleanup.AuditSubject, "leafline.audit"},
		{"completion.cleanup.enabled", c.Completion.Cleanup.On(), true},
		{"completion.cleanup.pressure_at", c.Completion.Cleanup.PressureAt, 0.5},
		{"completion.cleanup.pressure_grace", c.Completion.Cleanup.PressureGrace.String(), "2s"},
		{"completion.cleanup.audit_max_bytes", c.Completion.Cleanup.AuditMaxBytes, int64(1 << 30)},
		{"completion.cleanup.grace", c.Completion.Cleanup.Grace.String(), "1h0m0s"},
		{"completion.cleanup.max_per_pass", c.Completion.Cleanup.MaxPerPass, 10000},
		{"completion.overdue_after", c.Completion.OverdueAfter.String(), "5m0s"},
		{"completion.redrive_after", c.Completion.RedriveAfter.String(), "10m0s"},
		{"completion.history", c.Completion.History, 1},
		{"completion.hold_for", c.Completion.HoldFor.String(), "24h0m0s"},
		{"completion.held_max_per_site", c.Completion.HeldMaxPerSite, 100000},
		{"completion.held_max_bytes_per_site", c.Completion.HeldMaxBytesPerSite, int64(32 << 20)},
		{"log.level", c.Log.Level, "info"},
		{"log.format", c.Log.Format, "text"},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
	again := *c
	again.SetDefaults()
	if string(mustMarshal(t, &again)) != string(mustMarshal(t, c)) {
		t.Error("SetDefaults is not idempotent")
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	j := &Config{EventID: EventIDConfig{JSONField: "id"}}
	j.SetDefaults()
	if j.EventID.Header != "" || j.DeadLetter.Subject != "" || j.Sink.Dir != "" {
		t.Errorf("defaults derived from unset fields: %+v %+v %+v", j.EventID, j.DeadLetter, j.Sink)
	}
}

// The backlog batch follows the sink: a store sink commits a batch in one
// transaction whatever its size; a file sink fsyncs each event, so its
// batches stay near batch_size; a value that is set is kept.
func TestConfig_SetDefaults_BacklogBatch(t *testing.T) {
	for _, tc := range []struct {
		sink           string
		batch, backlog int
		want           int
	}{
		{"store", 0, 0, 1000},
		{"store", 100, 0, 1000},
		{"store", 0, 300, 300},
		{"file", 0, 0, 512},
		{"file", 100, 0, 200},
		{"file", 700, 0, 1000},
		{"file", 0, 900, 900},
	} {
		c := &Config{Sink: SinkConfig{Type: tc.sink}, Delivery: DeliveryConfig{BatchSize: tc.batch, BacklogBatchSize: tc.backlog}}
		c.SetDefaults()
		if got := c.Delivery.BacklogBatchSize; got != tc.want {
			t.Errorf("sink %s, batch_size %d, backlog_batch_size %d: default %d, want %d", tc.sink, tc.batch, tc.backlog, got, tc.want)
		}
	}
}

// TestConfig_Validate_InMemory mirrors systest.New: a config built
// in memory, with the topology set and no topology file.
func TestConfig_Validate_InMemory(t *testing.T) {
	tp := exampleTopology(t)
	tp.SetDefaults()
	for _, s := range tp.Sites {
		c := &Config{Site: s.Name, DataDir: t.TempDir(), Topology: tp,
			NATS: NATSConfig{Listen: "127.0.0.1:0"}, Ops: OpsConfig{Listen: "127.0.0.1:0"}}
		c.Delivery.BatchSize = 16 // edge tests configure every box alike
		c.SetDefaults()
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}

func TestConfig_RedriveAfterMustExceedDuplicateWindow(t *testing.T) {
	tp := exampleTopology(t)
	tp.SetDefaults()
	for _, c := range []struct {
		site    string
		redrive time.Duration
		bad     bool
	}{
		{"l1", 2 * time.Minute, true},
		{"l1", 3 * time.Minute, false},
		{"hub", time.Minute, false}, // only L1 redrives
	} {
		cfg := &Config{Site: c.site, DataDir: t.TempDir(), Topology: tp,
			NATS: NATSConfig{Listen: "127.0.0.1:0"}, Ops: OpsConfig{Listen: "127.0.0.1:0"}}
		cfg.Completion.RedriveAfter = Duration(c.redrive)
		cfg.SetDefaults()
		err := cfg.Validate()
		if got := err != nil && strings.Contains(err.Error(), "completion.redrive_after: 2m0s must exceed events.duplicate_window"); got != c.bad {
			t.Errorf("%s redrive_after %s: %v", c.site, c.redrive, err)
		}
	}
}
