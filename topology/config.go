package topology

import (
	"math"
	"time"
)

const defaultDuplicateWindow = 2 * time.Minute

// defaultReceiptsDuplicateWindow is the edge receipts stream's window.
const defaultReceiptsDuplicateWindow = 10 * time.Second

// AckPolicyAfterSinkCommit is the only accepted delivery.ack_policy: a
// message is ACKed only after its sink commit and its receipt's PubAck.
const AckPolicyAfterSinkCommit = "after_sink_commit"

// Config is one box's configuration: which site of the shared topology it
// is, plus the settings that are local to that box. Every field's zero value
// means the documented default, filled by SetDefaults.
type Config struct {
	// TopologyFile is the path of the shared topology, relative to the
	// directory of this config file. Required.
	TopologyFile string `json:"topology"`
	// Site is the name of this box's site in the topology. Required.
	Site string `json:"site"`
	// DataDir holds the JetStream store and the bbolt file. Required.
	DataDir string `json:"data_dir"`
	// MemoryLimitBytes is the Go runtime's soft memory limit for the
	// box's process (runtime/debug.SetMemoryLimit, as GOMEMLIMIT): the
	// collector runs sooner as the process nears it, at the cost of CPU,
	// and frees the embedded server's caches and pools. Zero means: GOMEMLIMIT
	// where the environment sets it, else 90% of the process's control
	// group limit where it has one (systemd's MemoryMax), else the role's
	// default (DefaultMemoryLimit). -1 means none. Otherwise at least
	// 64 MiB.
	MemoryLimitBytes int64 `json:"memory_limit_bytes,omitempty"`

	NATS       NATSConfig       `json:"nats,omitempty"`
	Ops        OpsConfig        `json:"ops,omitempty"`
	JetStream  JetStreamConfig  `json:"jetstream,omitempty"`
	Leafnode   LeafnodeConfig   `json:"leafnode,omitempty"`
	Sink       SinkConfig       `json:"sink,omitempty"`
	EventID    EventIDConfig    `json:"event_id,omitempty"`
	Delivery   DeliveryConfig   `json:"delivery,omitempty"`
	DeadLetter DeadLetterConfig `json:"dead_letter,omitempty"`
	Outbox     OutboxConfig     `json:"outbox,omitempty"`
	Completion CompletionConfig `json:"completion,omitempty"`
	Log        LogConfig        `json:"log,omitempty"`
	Signing    SigningConfig    `json:"signing,omitempty"`
	// Cluster, when its URLs are set, runs an l1 or hub box against an
	// existing NATS cluster instead of an embedded server (cluster.go).
	Cluster ClusterConfig `json:"cluster,omitempty"`

	// Topology is the loaded shared topology (not part of the file).
	Topology *Topology `json:"-"`
	// Source is the path the config was loaded from (not part of the file).
	Source string `json:"-"`
}

// NATSConfig is the box's NATS client listener.
type NATSConfig struct {
	// Listen is host:port of the client listener. Zero value means
	// "127.0.0.1:4222". Port 0 picks a free port. A host other than a
	// loopback address must be allowed with AllowRemote.
	Listen string `json:"listen,omitempty"`
	// AllowRemote permits a non-loopback Listen address. Every client has
	// full access to the box's streams, so it requires Auth.
	AllowRemote bool `json:"allow_remote,omitempty"`
	// Auth, if set, is the password every client of the listener presents
	// (the box's own connections inside the process excepted); the CLI
	// reads it from here. Required with AllowRemote.
	Auth ClientAuth `json:"auth,omitempty"`
}

// ClientAuth is the user and password of a box's NATS client listener.
// The password lives in a file or the environment, never in the config.
type ClientAuth struct {
	// User is the user name; zero value means "leafline".
	User string `json:"user,omitempty"`
	// PasswordFile holds the password (surrounding whitespace ignored).
	PasswordFile string `json:"password_file,omitempty"`
	// PasswordEnv names the environment variable holding the password.
	PasswordEnv string `json:"password_env,omitempty"`
}

// IsZero reports whether no field is set.
func (a ClientAuth) IsZero() bool { return a == ClientAuth{} }

// OpsConfig is the ops HTTP endpoint (/metrics, /healthz, /readyz, status API).
type OpsConfig struct {
	// Listen is host:port. Zero value means "127.0.0.1:8222". A host other
	// than a loopback address must be allowed with AllowRemote.
	Listen string `json:"listen,omitempty"`
	// AllowRemote permits a non-loopback Listen address.
	AllowRemote bool `json:"allow_remote,omitempty"`
	// Pprof serves Go's runtime profiles under /debug/pprof/ (heap, CPU,
	// goroutines) on Listen. Off by default: it is for diagnosing memory
	// or CPU use on a box, and a CPU profile costs while it runs.
	Pprof bool `json:"pprof,omitempty"`
}

// JetStreamConfig holds the embedded server's storage settings.
type JetStreamConfig struct {
	// SyncInterval is "always" (zero value: fsync every write) or a
	// duration such as "2m". Anything but "always" is logged as a
	// durability warning at startup.
	SyncInterval string `json:"sync_interval,omitempty"`
	// MaxStoreBytes caps JetStream file storage. Zero means no cap beyond the disk.
	MaxStoreBytes int64 `json:"max_store_bytes,omitempty"`
	// MaxStreamBytes caps each leafline stream (DiscardNew: publishes fail,
	// nothing old is dropped). Zero means 1 GiB.
	MaxStreamBytes int64 `json:"max_stream_bytes,omitempty"`
}

// LeafnodeConfig holds local leafnode settings.
type LeafnodeConfig struct {
	// ReconnectInterval is how often a cut upstream link is redialled.
	// Zero value means 1s.
	ReconnectInterval Duration `json:"reconnect_interval,omitempty"`
	// PingInterval is how often the box pings its links (and clients); a
	// link that misses 3 pongs in a row is closed and redialled, so a link
	// that silently drops packets is seen down in about 3 intervals, not
	// after minutes. Zero value means 5s.
	PingInterval Duration `json:"ping_interval,omitempty"`
	// UpstreamURL overrides the topology's upstream URL for this box
	// (e.g. a local proxy). Zero value means the topology's. Like the
	// topology's, it may carry a user name but never a password.
	UpstreamURL string `json:"upstream_url,omitempty"`
	// UpstreamURLs, in place of UpstreamURL, lists every node of an
	// upstream cluster: the link dials them in turn and moves to another
	// when the one it uses dies. Same rules as UpstreamURL.
	UpstreamURLs []string `json:"upstream_urls,omitempty"`
	// ListenTLS is the leafnode listener's certificate, key and (for
	// "mutual") the CA that signs the dialling sites' certificates. Required
	// exactly when the site's topology leafnode.tls is "on" or "mutual".
	ListenTLS TLSFiles `json:"listen_tls,omitempty"`
	// UpstreamTLS verifies the upstream's certificate (CAFile; zero value
	// means the system roots) and, when the upstream's leafnode.tls is
	// "mutual", holds this box's client certificate. Allowed only when the
	// upstream listens with TLS.
	UpstreamTLS TLSFiles `json:"upstream_tls,omitempty"`
	// UpstreamAuth is this box's secret for its upstream. Which field is
	// required follows the site's leafnode.auth.method in the topology.
	UpstreamAuth UpstreamAuth `json:"upstream_auth,omitempty"`
}

// EventIDConfig says where an event's identity is. At most one of Header and
// JSONField may be set; zero value means Header "Nats-Msg-Id".
type EventIDConfig struct {
	// Header names the message header that carries the event_id.
	Header string `json:"header,omitempty"`
	// JSONField names a top-level string field of the JSON payload that
	// carries the event_id.
	JSONField string `json:"json_field,omitempty"`
	// MaxLength bounds an event_id in bytes: 1..512 (the receipt format's
	// limit, so that every receipt an edge writes is one L1 accepts). Zero
	// value means 512.
	MaxLength int `json:"max_length,omitempty"`
}

// maxEventIDLen is the receipt format's bound on an event_id (the receipts
// package's MaxEventIDLen; topology imports no other leafline package).
const maxEventIDLen = 512

// DeliveryConfig governs the edge's consumer and ACK behaviour.
type DeliveryConfig struct {
	// AckPolicy: only "after_sink_commit" (the zero value) is accepted.
	AckPolicy string `json:"ack_policy,omitempty"`
	// Consumer is the durable pull consumer's name. Zero means "leafline-sink".
	Consumer string `json:"consumer,omitempty"`
	// BatchSize is the fetch batch. Zero value means 256. At most 1000.
	BatchSize int `json:"batch_size,omitempty"`
	// BacklogBatchSize is the fetch batch while there is a backlog: after
	// a fetch came back full, the next one asks for this many (one outbox
	// transaction and one receipts batch for all), until one comes back
	// short. At least BatchSize, at most 1000 (the receipts of a batch go
	// out as one atomic batch, whose server limit is 1000). Zero value
	// means, with the store sink, 1000: a batch is one transaction
	// whatever its size, and one atomic receipts batch, which its server
	// stages in a store of its own on disk (a fixed few milliseconds), so
	// a backlog drains fastest in the largest batches, and the events
	// behind a backlog wait for it anyway. With the file sink (an fsync
	// per event, so a batch takes as long as its events), twice
	// BatchSize, at most 1000.
	BacklogBatchSize int `json:"backlog_batch_size,omitempty"`
	// BatchTimeoutMS is the most a fetch waits to fill a batch. Zero means 50.
	BatchTimeoutMS int `json:"batch_timeout_ms,omitempty"`
	// AckWait is the consumer's AckWait. Zero value means 30s.
	AckWait Duration `json:"ack_wait,omitempty"`
	// MaxAckPending is the consumer's MaxAckPending. Zero value means 4096.
	MaxAckPending int `json:"max_ack_pending,omitempty"`
	// MaxDeliver is the consumer's MaxDeliver. Zero value means unlimited.
	MaxDeliver int `json:"max_deliver,omitempty"`
	// MaxDeliverAction is what happens to a message on its last allowed
	// delivery that fails temporarily: "dead_letter" or "leave" (zero
	// value: leave it and count the server's max-deliveries advisory).
	MaxDeliverAction string `json:"max_deliver_action,omitempty"`
	// MaxMessageBytes: a larger message is a permanent failure. Zero means 1 MiB.
	MaxMessageBytes int `json:"max_message_bytes,omitempty"`

	Retry           RetryConfig           `json:"retry,omitempty"`
	AckConfirmation AckConfirmationConfig `json:"ack_confirmation,omitempty"`
	InProgress      InProgressConfig      `json:"in_progress,omitempty"`
}

// RetryConfig is the temporary-failure policy.
type RetryConfig struct {
	// MaxRetries bounds in-place sink retries before a NAK. Zero means none.
	MaxRetries int `json:"max_retries,omitempty"`
	// BackoffMS is the base NAK delay. Zero value means 1000.
	BackoffMS int `json:"backoff_ms,omitempty"`
	// BackoffMaxMS caps the delay; must be >= BackoffMS. Zero means 60000.
	BackoffMaxMS int `json:"backoff_max_ms,omitempty"`
	// Mode: "fixed", "linear", "exponential" (zero value).
	Mode string `json:"mode,omitempty"`
	// Jitter: "none", "full", "equal" (zero value).
	Jitter string `json:"jitter,omitempty"`
	// TemporaryFailureAction: "nak" (zero value) or "leave_unacked".
	TemporaryFailureAction string `json:"temporary_failure_action,omitempty"`
}

// AckConfirmationConfig turns the final ACK into a confirmed DoubleAck.
type AckConfirmationConfig struct {
	// Enabled makes the final ACK a DoubleAck that waits for the server.
	Enabled bool `json:"enabled,omitempty"`
	// TimeoutMS is 1..60000. Zero value means 1000.
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// UnsupportedAction: "fail" (zero value) or "standard_ack": what to do
	// where a client path cannot confirm. Accepted for configuration
	// compatibility with nats-sinks; leafline's Go client confirms both the
	// ACK (DoubleAck) and the AckTerm (+TERM sent as a request), so no path
	// is unsupported and leafline_ack_confirmation_unsupported_total stays 0.
	UnsupportedAction string `json:"unsupported_action,omitempty"`
}

// InProgressConfig sends InProgress heartbeats during slow sink writes.
type InProgressConfig struct {
	// Enabled turns the heartbeats on.
	Enabled bool `json:"enabled,omitempty"`
	// IntervalMS must be below 80% of AckWait. Zero value means AckWait/3.
	IntervalMS int `json:"interval_ms,omitempty"`
}

// DeadLetterConfig is the DLQ path for permanent failures.
type DeadLetterConfig struct {
	// Enabled turns the DLQ path on: the DLQ stream is created and
	// permanent failures are recorded there before they are ACKed.
	Enabled bool `json:"enabled,omitempty"`
	// Subject of DLQ records. Zero value means "leafline.dlq.<site>".
	Subject string `json:"subject,omitempty"`
	// Stream that captures Subject. Zero value means "DLQ".
	Stream string `json:"stream,omitempty"`
	// IncludePayload copies the message payload into the DLQ record.
	IncludePayload bool `json:"include_payload,omitempty"`
	// IncludeHeaders copies the message headers into the DLQ record.
	IncludeHeaders bool `json:"include_headers,omitempty"`
	// IncludeError records the failure's error text in the DLQ record.
	IncludeError bool `json:"include_error,omitempty"`
	// AckTermAfterPub terminates (AckTerm) instead of ACKing the message
	// once its DLQ record and dead_lettered receipt are PubAck'ed.
	AckTermAfterPub bool `json:"ack_term_after_publish,omitempty"`
}

// OutboxConfig tunes the receipt outbox and its relay.
type OutboxConfig struct {
	// RelayInterval is how often the relay looks for pending receipts.
	// Zero value means 1s.
	RelayInterval Duration `json:"relay_interval,omitempty"`
	// PublishTimeout bounds one receipt batch's wait for PubAcks. Zero means 5s.
	PublishTimeout Duration `json:"publish_timeout,omitempty"`
	// Retention is how long published receipts are kept. Zero means 168h.
	Retention Duration `json:"retention,omitempty"`
}

// CompletionConfig is the L1 completion service.
type CompletionConfig struct {
	// Consumer is the durable consumer on the L1 receipts stream. Zero
	// value means "leafline-completion".
	Consumer string `json:"consumer,omitempty"`
	// Bucket is the KV bucket of completion records of the previous
	// layout: L1 imports it once into its completion log (package
	// completion) and writes it no more. Zero means "leafline_completions".
	Bucket string `json:"bucket,omitempty"`
	// QuarantineStream parks malformed receipts. Zero means "RQ".
	QuarantineStream string `json:"quarantine_stream,omitempty"`
	// QuarantineSubject prefix. Zero value means "leafline.quarantine".
	QuarantineSubject string `json:"quarantine_subject,omitempty"`
	// OverdueAfter: an event with no terminal receipt after this is overdue.
	// Zero value means 5m.
	OverdueAfter Duration `json:"overdue_after,omitempty"`
	// History is the number of revisions a completion bucket of the
	// previous layout keeps per key, 1..64 (zero means 1); it applies
	// only where a completion service records in that bucket (the
	// kvstore.Store). An L1 box records in its completion log, which
	// keeps every record it writes.
	History int `json:"history,omitempty"`
	// RedriveAfter: an event that an alive edge has still not reported
	// this long after it was published (and after overdue_after) is
	// published again on the origin stream, so that an event or receipt a
	// hop lost is repaired end to end (see completion/redrive.go). It must
	// exceed events.duplicate_window. Zero value means 10m.
	RedriveAfter Duration `json:"redrive_after,omitempty"`
	// HoldFor is how long L1 holds a receipt for an event whose origin it
	// has not seen (status origin_unknown): past it, with no receipt held
	// for the event more recently, the held receipts are quarantined
	// (refusal origin_unknown). Zero value means 24h; at least 1s.
	HoldFor Duration `json:"hold_for,omitempty"`
	// HeldMaxPerSite bounds the receipts held for one site: past it, the
	// site's oldest held events are quarantined (refusal held_limit)
	// until it is within it again. It bounds what a site that reports
	// events L1 never saw (a stolen edge forging ids) costs L1. Zero value
	// means 100000; -1 means no bound.
	HeldMaxPerSite int `json:"held_max_per_site,omitempty"`
	// HeldMaxBytesPerSite bounds the same receipts by their size (each
	// receipt's encoding), in the same way. Zero value means 32 MiB; -1
	// means no bound; otherwise at least 64 KiB.
	HeldMaxBytesPerSite int64 `json:"held_max_bytes_per_site,omitempty"`
	// Cleanup deletes the origin messages of done events, with an audit
	// record each (see CleanupConfig). Off by default.
	Cleanup CleanupConfig `json:"cleanup,omitzero"`
}

// LogConfig configures log/slog.
type LogConfig struct {
	// Level: "debug", "info" (zero value), "warn", "error".
	Level string `json:"level,omitempty"`
	// Format: "text" (zero value) or "json".
	Format string `json:"format,omitempty"`
}

// Durable reports whether JetStream fsyncs every write.
func (j JetStreamConfig) Durable() bool { return j.SyncInterval == "always" }

// The default memory limits of the roles (Config.MemoryLimitBytes). Each
// bounds what its box holds however much work passes through it: the
// embedded server's block caches and message pools, the duplicate
// windows of its streams at its rate, and its own buffers, which are
// bounded in bytes. docs/guide/operating.md gives each role's peak
// memory under these limits and what to size a machine at.
const (
	// DefaultEdgeMemoryLimit: an edge's live heap stays near 60 MiB
	// whatever it drains; the rest is room for the collector.
	DefaultEdgeMemoryLimit = 160 << 20
	// DefaultHubMemoryLimit: a hub holds its edges' backlogs on disk,
	// not in memory; its heap is its links' batches in flight.
	DefaultHubMemoryLimit = 192 << 20
	// DefaultL1MemoryLimit: L1 also applies every receipt and keeps the
	// completion state's pages in its heap's working set.
	DefaultL1MemoryLimit = 384 << 20
)

// CgroupMemoryShare is the part of its control group's memory limit
// (systemd's MemoryMax) that a box takes as its Go memory limit: the rest
// is room for what the Go runtime does not count.
const CgroupMemoryShare = 0.9

// MemoryMax is the control group memory limit under which a box takes
// limit as its Go memory limit: limit over CgroupMemoryShare, rounded up
// to a MiB.
func MemoryMax(limit int64) int64 {
	const mib = 1 << 20
	return (int64(math.Ceil(float64(limit)/CgroupMemoryShare)) + mib - 1) / mib * mib
}

// DefaultMemoryLimit is the default memory limit of a box of role r (0
// for a role it does not know).
func DefaultMemoryLimit(r Role) int64 {
	switch r {
	case RoleEdge:
		return DefaultEdgeMemoryLimit
	case RoleHub:
		return DefaultHubMemoryLimit
	case RoleL1:
		return DefaultL1MemoryLimit
	}
	return 0
}

// Role is the role of the box's site in its topology ("" while either is
// unknown).
func (c *Config) Role() Role {
	if c.Topology == nil {
		return ""
	}
	if s, ok := c.Topology.Site(c.Site); ok {
		return s.Role
	}
	return ""
}

// SetDefaults fills every zero value with the default its field documents.
// It is idempotent and reads nothing but c: the dead-letter subject and the
// sink directory derive from Site and DataDir, and stay empty while those are.
func (c *Config) SetDefaults() {
	setString(&c.NATS.Listen, "127.0.0.1:4222")
	setString(&c.Ops.Listen, "127.0.0.1:8222")
	setString(&c.JetStream.SyncInterval, "always")
	setInt64(&c.JetStream.MaxStreamBytes, 1<<30)
	setDuration(&c.Leafnode.ReconnectInterval, time.Second)
	setDuration(&c.Leafnode.PingInterval, 5*time.Second)
	c.Sink.setDefaults(c.DataDir)
	if c.EventID.Header == "" && c.EventID.JSONField == "" {
		c.EventID.Header = "Nats-Msg-Id"
	}
	setInt(&c.EventID.MaxLength, 512)
	c.Delivery.setDefaults(c.Sink.Type)
	if c.Site != "" {
		setString(&c.DeadLetter.Subject, "leafline.dlq."+c.Site)
	}
	setString(&c.DeadLetter.Stream, "DLQ")
	setDuration(&c.Outbox.RelayInterval, time.Second)
	setDuration(&c.Outbox.PublishTimeout, 5*time.Second)
	setDuration(&c.Outbox.Retention, 168*time.Hour)
	co := &c.Completion
	setString(&co.Consumer, "leafline-completion")
	setString(&co.Bucket, "leafline_completions")
	setString(&co.QuarantineStream, "RQ")
	setString(&co.QuarantineSubject, "leafline.quarantine")
	setDuration(&co.OverdueAfter, 5*time.Minute)
	setInt(&co.History, 1)
	setDuration(&co.RedriveAfter, 10*time.Minute)
	setDuration(&co.HoldFor, 24*time.Hour)
	setInt(&co.HeldMaxPerSite, 100_000)
	setInt64(&co.HeldMaxBytesPerSite, 32<<20)
	c.Cluster.setDefaults(c.Site)
	co.Cleanup.setDefaults()
	setString(&c.Log.Level, "info")
	setString(&c.Log.Format, "text")
}

// maxBatchSize bounds delivery.batch_size and backlog_batch_size: a
// batch's receipts go out as one atomic batch, and nats-server takes at
// most 1000 messages in one.
const maxBatchSize = 1000

func (d *DeliveryConfig) setDefaults(sinkType string) {
	setString(&d.AckPolicy, AckPolicyAfterSinkCommit)
	setString(&d.Consumer, "leafline-sink")
	setInt(&d.BatchSize, 256)
	backlog := min(2*d.BatchSize, maxBatchSize) // file sink: an fsync per event
	if sinkType == "store" {
		backlog = maxBatchSize // one transaction per batch, whatever its size
	}
	setInt(&d.BacklogBatchSize, backlog)
	setInt(&d.BatchTimeoutMS, 50)
	setDuration(&d.AckWait, 30*time.Second)
	setInt(&d.MaxAckPending, 4096)
	setString(&d.MaxDeliverAction, "leave")
	setInt(&d.MaxMessageBytes, 1<<20)
	r := &d.Retry
	setInt(&r.BackoffMS, 1000)
	setInt(&r.BackoffMaxMS, 60000)
	setString(&r.Mode, "exponential")
	setString(&r.Jitter, "equal")
	setString(&r.TemporaryFailureAction, "nak")
	a := &d.AckConfirmation
	setInt(&a.TimeoutMS, 1000)
	setString(&a.UnsupportedAction, "fail")
}

func setInt(p *int, def int) {
	if *p == 0 {
		*p = def
	}
}

func setInt64(p *int64, def int64) {
	if *p == 0 {
		*p = def
	}
}

func setDuration(p *Duration, def time.Duration) {
	if *p == 0 {
		*p = Duration(def)
	}
}
