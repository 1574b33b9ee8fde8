package completion

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology/subjects"
)

// Defaults applied by NewService to zero-valued ServiceConfig fields.
const (
	DefaultConsumer           = "leafline-completion"
	DefaultQuarantineStream   = "RQ"
	DefaultQuarantineSubject  = "leafline.quarantine"
	DefaultBatchSize          = 256
	DefaultAckWait            = 30 * time.Second
	DefaultOpTimeout          = 10 * time.Second
	DefaultRetryDelay         = 500 * time.Millisecond
	DefaultQuarantineMaxBytes = 1 << 30
	DefaultInFlight           = 64
	DefaultApplyBatch         = 128
	DefaultOriginConsumer     = "leafline-origin"
	DefaultOriginHeader       = "Nats-Msg-Id"
	DefaultRedriveMax         = 1000
	DefaultHoldFor            = 24 * time.Hour
	// DefaultHeldMaxPerSite and DefaultHeldMaxBytesPerSite bound the
	// receipts held for one site (ServiceConfig.HeldMaxPerSite).
	DefaultHeldMaxPerSite      = 100_000
	DefaultHeldMaxBytesPerSite = 32 << 20

	// MaxStateBatch bounds ApplyBatch with an OpenState: a State other
	// than the KV Store takes larger batches (it has no atomic batch limit).
	MaxStateBatch = 4096

	// MaxRetryDelay caps the NAK delay of a receipt that keeps failing.
	MaxRetryDelay = 30 * time.Second
)

// ServiceConfig configures a completion Service. NewService fills zero
// values with the defaults stated on each field, then validates.
type ServiceConfig struct {
	// JS is the JetStream context of the L1 domain. Required.
	JS jetstream.JetStream
	// Stream is the receipts stream to consume, e.g. "R1". Required. It is
	// created by someone else; Run waits (retrying) until it exists.
	Stream string
	// Consumer is the durable pull consumer name; zero = DefaultConsumer.
	// Instances that share it share the work.
	Consumer string
	// Bucket is the completion KV bucket; zero = kvstore.DefaultBucket. Setup creates
	// it if absent (History, FileStorage, Replicas).
	Bucket string
	// History is the number of revisions Bucket keeps per key, 1..64; zero
	// = 1. Setup creates Bucket with it and sets an existing Bucket to it
	// (see StoreConfig.History). Instances sharing a bucket must agree.
	History int
	// Replicas for the bucket and the quarantine stream; zero = 1.
	Replicas int
	// QuarantineStream is created by Setup if absent (FileStorage,
	// DiscardNew); zero = DefaultQuarantineStream.
	QuarantineStream string
	// QuarantineSubject is a subject prefix; records are published on
	// "<prefix>.receipts". Zero = DefaultQuarantineSubject.
	QuarantineSubject string
	// QuarantineMaxBytes limits a quarantine stream that Setup creates; when
	// it is full, quarantining fails and the receipts wait in Stream (NAK).
	// Zero = DefaultQuarantineMaxBytes (1 GiB); -1 = unlimited.
	QuarantineMaxBytes int64
	// BatchSize is the number of messages the pull iterator buffers; zero =
	// DefaultBatchSize. The consumer's MaxAckPending is 4×BatchSize.
	BatchSize int
	// AckWait of the consumer Setup creates; zero = DefaultAckWait (30s).
	AckWait time.Duration
	// OpTimeout bounds the work on one message (KV read/write, quarantine
	// publish) and each Setup attempt; zero = DefaultOpTimeout (10s).
	OpTimeout time.Duration
	// RetryDelay is the NAK delay after a first transient failure; it doubles
	// with each redelivery up to MaxRetryDelay. Zero = DefaultRetryDelay.
	RetryDelay time.Duration
	// OpenState opens the State the Service records completions in, once,
	// at Setup. Nil: the KV Store (OpenStore with Bucket, History,
	// Replicas, OverdueAfter and Sites). The L1 box opens package
	// completion's State here.
	OpenState func(ctx context.Context) (record.State, error)
	// Accept is an optional extra check of a well-formed receipt (unknown
	// site or processor → return an error). A non-nil error quarantines the
	// receipt. A panic in Accept is recovered and treated as a transient
	// failure (NAK), not as a verdict on the receipt. Nil accepts everything.
	Accept func(receipt.Receipt) error
	// Verify, if set, checks a well-formed, accepted receipt's signature
	// (data is the message body as received, h its headers). It returns
	// whether the receipt was verified; an error quarantines the receipt
	// (unsigned where a signature is required, forged, or altered). A
	// bundle is verified once, whole: r is its first receipt (every one
	// names the same site), data the bundle's body and h its headers,
	// which Verifier.VerifyMsg checks.
	Verify func(r receipt.Receipt, data []byte, h nats.Header) (verified bool, err error)
	// SubjectPrefix, if set, binds each receipt to its subject: it must
	// arrive on "<SubjectPrefix>.<site>.<status>" with its own site and
	// status, or in a bundle on "<SubjectPrefix>.<site>.bundle" with its
	// own site, else it is quarantined (ErrSubjectMismatch). Set it where
	// every link can deliver only its own site's subjects.
	SubjectPrefix string
	// Classes are the class lanes of the receipts (receipt.ClassSubject),
	// most urgent first; they need SubjectPrefix. Each has a consumer of
	// its own on Stream (receipt.ClassConsumer), filtered to its lane and
	// consumed beside Consumer, which leaves the lanes' receipts to them:
	// a backlog of other receipts does not hold a class's back.
	Classes []string
	// ProcessorIsSite: every receipt's processor must be its site (a site
	// reports only for itself), else it is quarantined
	// (ErrProcessorNotSite). A signature checked against the site's key
	// then binds the processor too.
	ProcessorIsSite bool
	// Logger; nil = slog.Default(). Payloads are never logged.
	Logger *slog.Logger

	// IndexBucket is the status index bucket (see the package
	// documentation); zero = Bucket + IndexBucketSuffix. Setup creates it
	// like Bucket.
	IndexBucket string
	// InFlight is the number of lanes that apply messages concurrently:
	// different event_ids in parallel, one event_id always in the same lane
	// (serialized). Zero = DefaultInFlight (64); 1 = one at a time.
	InFlight int
	// ApplyBatch is the most receipts whose records the receipts loop
	// writes with one atomic batch (Store.ApplyBatch): one disk flush for
	// all of them instead of one per receipt. Zero = DefaultApplyBatch;
	// 1 = one compare-and-set write per receipt in InFlight lanes. With
	// batches, min(InFlight, 4) workers apply them, one event_id always in
	// the same worker; each message is ACKed only after its batch committed.
	ApplyBatch int

	// OriginStream is the origin events stream to follow (e.g. "L1A") so
	// that every published event gets a pending record. Zero = no origin
	// tracking: events are only known from their receipts and stay pending
	// (their expected processors unknown). The stream must use
	// LimitsPolicy retention: the tracker's own consumer ACKs only to
	// record its progress, which then deletes nothing (see Caveats).
	// With it, a receipt counts only from a processor the event was
	// routed to, and a receipt for an event not seen yet is held, status
	// origin_unknown, until the tracker sees it (StoreConfig.HoldUntilOrigin).
	OriginStream string
	// OriginConsumer is the tracker's durable pull consumer on
	// OriginStream; zero = DefaultOriginConsumer.
	OriginConsumer string
	// OriginHeader is the header holding an origin event's event_id; zero
	// = DefaultOriginHeader ("Nats-Msg-Id"). Ignored when OriginEventID is set.
	OriginHeader string
	// OriginEventID optionally extracts the event_id of an origin message
	// (for example from a JSON field); it must agree with the edges.
	OriginEventID func(jetstream.Msg) (string, error)
	// Expected returns the processors expected to report an event
	// published on subject (for leafline: every edge whose filter matches).
	// Required with OriginStream. A panic is recovered and retried.
	Expected func(subject string) []string
	// OverdueAfter: an event still pending this long after it was
	// published is overdue; zero = DefaultOverdueAfter (5m).
	OverdueAfter time.Duration
	// Sites are always listed in Summary (typically every edge site).
	Sites []string
	// Streams names the streams whose fill Summary reports
	// (record.Summary.Streams), in this order; each name once. A stream
	// that does not exist is left out. Summary reads them with one info
	// call each, all within 2 s, and reuses what it read for 2 s. Zero =
	// none.
	Streams []string
	// RedriveAfter turns on the redrive (see redrive.go): an event still
	// missing a processor this long after it was published (and after its
	// last redrive) is published again on the origin stream, while that
	// processor is alive. Zero = off. It must exceed the origin stream's
	// duplicate window, or the copy is dropped as a duplicate.
	RedriveAfter time.Duration
	// HoldFor is how long a receipt is held for an event whose origin the
	// tracker has not seen (status origin_unknown): past it, with no
	// receipt held more recently, the held receipts are quarantined
	// (refusal origin_unknown) and the record is removed. Zero =
	// DefaultHoldFor. Used only with OriginStream.
	HoldFor time.Duration
	// HeldMaxPerSite bounds the receipts held for events whose origin is
	// unknown, per site (the receipt's site): past it, the site's held
	// events are quarantined oldest first (by their last receipt held),
	// with every receipt held for each (refusal held_limit), and their
	// records removed, until the site is within it again (held_limit.go).
	// Zero = DefaultHeldMaxPerSite; -1 = no bound. Used only with
	// OriginStream.
	HeldMaxPerSite int
	// HeldMaxBytesPerSite bounds the same receipts by their size (each
	// receipt's encoding, as its quarantine record carries it), per site,
	// in the same way. Zero = DefaultHeldMaxBytesPerSite; -1 = no bound.
	HeldMaxBytesPerSite int64
	// RedriveMax bounds the events redriven per round (every
	// RedriveAfter/4); zero = DefaultRedriveMax.
	RedriveMax int
	// Address, if set, is the subject on which an event published on
	// subject is sent again to the edge site alone
	// (topology.AddressedSubject): the redrive and Resend then send each
	// copy to the one edge that is missing the event. Nil: a copy goes on
	// the origin subject, to every edge it matches.
	Address func(site, subject string) string
	// OriginDuplicates is the origin stream's Nats-Msg-Id window: a copy
	// of an event published within it would be taken for a duplicate and
	// dropped, so Resend sends again only events published longer ago,
	// and not sent again within it.
	OriginDuplicates time.Duration
}

func (c *ServiceConfig) setDefaults() {
	setDefault(&c.Consumer, DefaultConsumer)
	setDefault(&c.Bucket, kvstore.DefaultBucket)
	setDefault(&c.QuarantineStream, DefaultQuarantineStream)
	setDefault(&c.QuarantineSubject, DefaultQuarantineSubject)
	setDefault(&c.Replicas, 1)
	setDefault(&c.History, 1)
	setDefault(&c.RedriveMax, DefaultRedriveMax)
	setDefault(&c.QuarantineMaxBytes, DefaultQuarantineMaxBytes)
	setDefault(&c.BatchSize, DefaultBatchSize)
	setDefault(&c.AckWait, DefaultAckWait)
	setDefault(&c.OpTimeout, DefaultOpTimeout)
	setDefault(&c.RetryDelay, DefaultRetryDelay)
	setDefault(&c.IndexBucket, c.Bucket+kvstore.IndexBucketSuffix)
	setDefault(&c.InFlight, DefaultInFlight)
	setDefault(&c.ApplyBatch, DefaultApplyBatch)
	setDefault(&c.OriginConsumer, DefaultOriginConsumer)
	setDefault(&c.OriginHeader, DefaultOriginHeader)
	setDefault(&c.OverdueAfter, kvstore.DefaultOverdueAfter)
	setDefault(&c.HoldFor, DefaultHoldFor)
	setDefault(&c.HeldMaxPerSite, DefaultHeldMaxPerSite)
	setDefault(&c.HeldMaxBytesPerSite, DefaultHeldMaxBytesPerSite)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate reports every problem at once, each prefixed with its field
// name, wrapped in ErrInvalidConfig.
func (c *ServiceConfig) Validate() error {
	var p problems
	c.checkNames(&p)
	c.checkOrigin(&p)
	c.checkLimits(&p)
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", record.ErrInvalidConfig, errors.Join(p...))
}

// problems collects a config's problems, each prefixed with its field.
type problems []error

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// checkNames checks the connection and the names of streams, consumers
// and buckets.
func (c *ServiceConfig) checkNames(p *problems) {
	if c.JS == nil {
		p.add("JS", "required")
	}
	for _, f := range []struct{ field, v string }{
		{"Stream", c.Stream}, {"Consumer", c.Consumer}, {"Bucket", c.Bucket}, {"QuarantineStream", c.QuarantineStream},
	} {
		if err := receipt.CheckName(f.v); err != nil {
			p.add(f.field, "%v", err)
		}
	}
	if c.Stream != "" && c.Stream == c.QuarantineStream {
		p.add("QuarantineStream", "must differ from Stream")
	}
	for i, name := range c.Streams {
		if err := receipt.CheckName(name); err != nil {
			p.add(fmt.Sprintf("Streams[%d]", i), "%v", err)
		} else if slices.Index(c.Streams, name) < i {
			p.add(fmt.Sprintf("Streams[%d]", i), "%q is listed twice", name)
		}
	}
	if err := receipt.CheckName(c.IndexBucket); err != nil {
		p.add("IndexBucket", "%v", err)
	} else if c.IndexBucket == c.Bucket {
		p.add("IndexBucket", "must differ from Bucket")
	}
}

// checkOrigin checks the origin stream's settings, when there is one.
func (c *ServiceConfig) checkOrigin(p *problems) {
	if c.OriginStream != "" {
		if err := receipt.CheckName(c.OriginStream); err != nil {
			p.add("OriginStream", "%v", err)
		} else if c.OriginStream == c.Stream || c.OriginStream == c.QuarantineStream {
			p.add("OriginStream", "must differ from Stream and QuarantineStream")
		}
		if err := receipt.CheckName(c.OriginConsumer); err != nil {
			p.add("OriginConsumer", "%v", err)
		}
		if c.OriginHeader == "" || strings.ContainsAny(c.OriginHeader, ": \t\r\n") {
			p.add("OriginHeader", "must be a header name")
		}
		if c.Expected == nil {
			p.add("Expected", "required with OriginStream")
		}
	}
}

// checkLimits checks the sizes, counts and durations.
func (c *ServiceConfig) checkLimits(p *problems) {
	if c.InFlight < 1 || c.InFlight > 1024 {
		p.add("InFlight", "must be 1..1024, got %d", c.InFlight)
	}
	maxBatch := kvstore.MaxApplyBatch
	if c.OpenState != nil {
		maxBatch = MaxStateBatch
	}
	if c.ApplyBatch < 1 || c.ApplyBatch > maxBatch {
		p.add("ApplyBatch", "must be 1..%d, got %d", maxBatch, c.ApplyBatch)
	}
	if c.OverdueAfter < 0 {
		p.add("OverdueAfter", "must not be negative")
	}
	if c.RedriveAfter < 0 {
		p.add("RedriveAfter", "must not be negative")
	}
	if c.HoldFor < 0 {
		p.add("HoldFor", "must not be negative")
	}
	if c.HeldMaxPerSite < -1 {
		p.add("HeldMaxPerSite", "must be -1 (no bound) or at least 1, got %d", c.HeldMaxPerSite)
	}
	if c.HeldMaxBytesPerSite < -1 {
		p.add("HeldMaxBytesPerSite", "must be -1 (no bound) or at least 1, got %d", c.HeldMaxBytesPerSite)
	}
	if c.RedriveAfter > 0 && c.OriginStream == "" {
		p.add("RedriveAfter", "needs OriginStream")
	}
	if c.RedriveMax < 1 || c.RedriveMax > record.MaxListLimit*10 {
		p.add("RedriveMax", "must be 1..%d", record.MaxListLimit*10)
	}
	for i, site := range c.Sites {
		if err := receipt.CheckName(site); err != nil {
			p.add(fmt.Sprintf("Sites[%d]", i), "%v", err)
		}
	}
	if err := subjects.ValidateLiteral(c.QuarantineSubject); err != nil {
		p.add("QuarantineSubject", "%v", err)
	}
	if c.SubjectPrefix != "" {
		if err := subjects.ValidateLiteral(c.SubjectPrefix); err != nil {
			p.add("SubjectPrefix", "%v", err)
		}
	} else if len(c.Classes) > 0 {
		p.add("Classes", "need SubjectPrefix: a class lane is a subject under it")
	}
	for i, class := range c.Classes {
		if !receipt.ValidClass(class) || slices.Index(c.Classes, class) < i {
			p.add(fmt.Sprintf("Classes[%d]", i), "%q: want a class token (receipt.ValidClass), each once", class)
		}
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		p.add("Replicas", "must be 1..5, got %d", c.Replicas)
	}
	if c.History < 1 || c.History > jetstream.KeyValueMaxHistory {
		p.add("History", "must be 1..%d, got %d", jetstream.KeyValueMaxHistory, c.History)
	}
	if c.QuarantineMaxBytes < -1 {
		p.add("QuarantineMaxBytes", "must be positive or -1, got %d", c.QuarantineMaxBytes)
	}
	if c.BatchSize < 1 || c.BatchSize > 10_000 {
		p.add("BatchSize", "must be 1..10000, got %d", c.BatchSize)
	}
	for _, f := range []struct {
		field string
		v     time.Duration
	}{{"AckWait", c.AckWait}, {"OpTimeout", c.OpTimeout}, {"RetryDelay", c.RetryDelay}} {
		if f.v < 0 {
			p.add(f.field, "must not be negative")
		}
	}
	if c.AckWait > 0 && c.OpTimeout >= c.AckWait {
		p.add("OpTimeout", "must be shorter than AckWait (%v)", c.AckWait)
	}
}
