package cleanup

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology/subjects"
)

// Cleanup defaults.
const (
	DefaultCleanupInterval   = 30 * time.Second
	DefaultCleanupMaxPerPass = 10000
	// DefaultCleanupWorkers is how many messages a pass decides and
	// deletes at once (each is a few round trips).
	DefaultCleanupWorkers = 8
	// DefaultPressureAt and DefaultPressureGrace: from half full, the
	// origin stream keeps a done event two seconds, not Grace.
	DefaultPressureAt    = 0.5
	DefaultPressureGrace = 2 * time.Second
)

// CleanupConfig configures a Cleaner. NewCleaner fills zero values with the
// defaults stated on each field, then validates.
type CleanupConfig struct {
	// JS is the JetStream context of the L1 domain. Required.
	JS jetstream.JetStream
	// Store reads the completion records (a Service's State, or a
	// *Store). Required.
	Store record.RecordReader
	// OriginStream is the stream to clean (L1A). Required; it must use
	// LimitsPolicy retention, like the origin tracker's.
	OriginStream string
	// OriginHeader holds an origin message's event_id; zero =
	// Nats-Msg-Id. Ignored when OriginEventID is set.
	OriginHeader string
	// OriginEventID optionally extracts the event_id from an origin message
	// (it must be the tracker's); with it the cleaner reads payloads too.
	OriginEventID func(jetstream.Msg) (string, error)
	// Grace is how long after the last terminal receipt (and after the
	// message was stored) a message is kept. Required, positive.
	Grace time.Duration
	// AllowDeadLettered lets an event whose processors all reported a
	// terminal status, some of them dead_lettered, be cleaned. False
	// (default): a dead-lettered event keeps its origin message.
	AllowDeadLettered bool
	// AllowExpired lets an event whose processors all reported a terminal
	// status, some of them expired, be cleaned (and a dead-lettered one
	// too only with AllowDeadLettered). False (default): an event an edge
	// expired keeps its origin message.
	AllowExpired bool
	// PressureAt is how full the origin stream (FillOf: bytes or
	// messages against its limits) must be for the cleaner to work
	// under pressure: PressureGrace in place of Grace, and passes one
	// after another while they delete. Zero = DefaultPressureAt.
	PressureAt float64
	// PressureGrace is the grace period under pressure; zero =
	// DefaultPressureGrace. The longer of it and Grace is never used:
	// min(Grace, PressureGrace).
	PressureGrace time.Duration
	// Interval between passes of Run; zero = DefaultCleanupInterval.
	Interval time.Duration
	// MaxPerPass bounds the origin messages one pass examines; zero =
	// DefaultCleanupMaxPerPass.
	MaxPerPass int
	// Workers: messages decided and deleted at once; zero =
	// DefaultCleanupWorkers.
	Workers int
	// AuditStream, AuditSubject, AuditMaxAge: the audit records' stream
	// (created if absent), subject prefix and retention; zero =
	// DefaultAuditStream, DefaultAuditSubject, DefaultAuditMaxAge.
	AuditStream  string
	AuditSubject string
	AuditMaxAge  time.Duration
	// AuditMaxBytes bounds an audit stream the cleaner creates: past
	// it, the oldest records go. Zero = DefaultAuditMaxBytes; -1 = no
	// limit.
	AuditMaxBytes int64
	// Replicas of an audit stream the cleaner creates; zero = 1.
	Replicas int
	// DeletedBy names who deletes, in every audit record; zero =
	// "leafline cleaner on <hostname>, pid <pid>".
	DeletedBy string
	// Redriven, if set, reports when this process last redrove an event
	// (Service.RedrivenAt): an event redriven less than Grace ago is kept.
	Redriven func(eventID string) (time.Time, bool)
	// Logger; nil = slog.Default(). Payloads are never logged.
	Logger *slog.Logger
}

func (c *CleanupConfig) setDefaults() {
	setDefault(&c.OriginHeader, jetstream.MsgIDHeader)
	setDefault(&c.Interval, DefaultCleanupInterval)
	setDefault(&c.PressureAt, DefaultPressureAt)
	setDefault(&c.PressureGrace, DefaultPressureGrace)
	setDefault(&c.AuditMaxBytes, DefaultAuditMaxBytes)
	setDefault(&c.MaxPerPass, DefaultCleanupMaxPerPass)
	setDefault(&c.Workers, DefaultCleanupWorkers)
	setDefault(&c.AuditStream, DefaultAuditStream)
	setDefault(&c.AuditSubject, DefaultAuditSubject)
	setDefault(&c.AuditMaxAge, DefaultAuditMaxAge)
	setDefault(&c.Replicas, 1)
	if c.DeletedBy == "" {
		host, _ := os.Hostname()
		c.DeletedBy = "leafline cleaner on " + host + ", pid " + strconv.Itoa(os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports every problem at once, each prefixed with its field
// name, wrapped in ErrInvalidConfig.
func (c *CleanupConfig) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.JS == nil {
		add("JS", "required")
	}
	if c.Store == nil {
		add("Store", "required")
	}
	if err := receipt.CheckName(c.OriginStream); err != nil {
		add("OriginStream", "%v", err)
	}
	if err := receipt.CheckName(c.AuditStream); err != nil {
		add("AuditStream", "%v", err)
	}
	if c.AuditStream == c.OriginStream {
		add("AuditStream", "must differ from OriginStream")
	}
	if err := subjects.ValidateLiteral(c.AuditSubject); err != nil {
		add("AuditSubject", "%v", err)
	}
	if c.Grace <= 0 {
		add("Grace", "must be positive, got %s", c.Grace)
	}
	if c.PressureAt <= 0 || c.PressureAt > 1 {
		add("PressureAt", "must be in (0, 1], got %g", c.PressureAt)
	}
	if c.PressureGrace <= 0 {
		add("PressureGrace", "must be positive, got %s", c.PressureGrace)
	}
	if c.AuditMaxBytes < -1 || c.AuditMaxBytes == 0 {
		add("AuditMaxBytes", "must be positive or -1 (no limit), got %d", c.AuditMaxBytes)
	}
	if c.Interval <= 0 {
		add("Interval", "must be positive, got %s", c.Interval)
	}
	if c.AuditMaxAge <= 0 {
		add("AuditMaxAge", "must be positive, got %s", c.AuditMaxAge)
	}
	if c.MaxPerPass < 1 || c.MaxPerPass > 1_000_000 {
		add("MaxPerPass", "must be 1..1000000, got %d", c.MaxPerPass)
	}
	if c.Workers < 1 || c.Workers > 256 {
		add("Workers", "must be 1..256, got %d", c.Workers)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		add("Replicas", "must be 1..5, got %d", c.Replicas)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", record.ErrInvalidConfig, errors.Join(errs...))
}

// policy names the rule the audit records cite.
func (c *CleanupConfig) policy() string {
	s := "every expected processor processed"
	switch {
	case c.AllowDeadLettered && c.AllowExpired:
		s = "every expected processor processed, dead_lettered or expired"
	case c.AllowDeadLettered:
		s = "every expected processor processed or dead_lettered"
	case c.AllowExpired:
		s = "every expected processor processed or expired"
	}
	return s + "; grace " + c.Grace.String() + " (" + c.PressureGrace.String() + " from " +
		strconv.FormatFloat(c.PressureAt*100, 'f', -1, 64) + "% full); no redrive pending; event_id matches at the recorded sequence"
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}
