package record

import (
	"fmt"
	"slices"
	"time"

	"github.com/leafline/leafline/receipt"
)

// EventStatus is the overall status of an event at L1, derived from its
// completion record (see Completion.Status).
type EventStatus string

// Overall statuses of an event.
const (
	// EventPending: not every expected processor has reported yet, or the
	// expected processors are not known yet (the origin message has not been
	// seen), and no processor reported dead_lettered or expired.
	EventPending EventStatus = "pending"
	// EventComplete: the origin message was seen and every expected
	// processor reported processed (vacuously true when none is expected).
	EventComplete EventStatus = "complete"
	// EventDeadLettered: at least one processor reported dead_lettered.
	EventDeadLettered EventStatus = "dead_lettered"
	// EventExpired: at least one processor reported expired (the event
	// was older than its expiry when that processor reached it, and was
	// not processed there) and none reported dead_lettered. Terminal, as
	// dead_lettered is.
	EventExpired EventStatus = "expired"
	// EventOriginUnknown: receipts are held for the event (see
	// Completion.Held) but its origin message has not been seen, so
	// nothing says it was ever published or to whom it was routed. The
	// receipts count for nothing until the origin is seen.
	EventOriginUnknown EventStatus = "origin_unknown"
	// EventRetired: every expected processor has a terminal status, and
	// at least one of them is StatusRetired (its site was retired before
	// it reported) while none reported dead_lettered or expired.
	// Terminal, and not complete: the work was not done there.
	EventRetired EventStatus = "retired"
)

// StatusRetired is the status L1 records for a processor whose site was
// retired (topology sites[].retired, or removed) before it reported an
// event routed to it. No edge sends it: a receipt carries only
// receipt.Status's values. A receipt the site sent before it was retired
// that reaches L1 afterwards replaces it.
const StatusRetired receipt.Status = "retired"

// Valid reports whether s is one of the defined overall statuses.
func (s EventStatus) Valid() bool {
	return s == EventPending || s == EventComplete || s == EventDeadLettered || s == EventExpired || s == EventOriginUnknown || s == EventRetired
}

// ProcessorRecord is what one processor reported for one event.
type ProcessorRecord struct {
	Status      receipt.Status `json:"status"`
	Site        string         `json:"site"`
	ReceiptID   string         `json:"receipt_id"`
	ProcessedAt time.Time      `json:"processed_at"`
	ReceivedAt  time.Time      `json:"received_at"` // when L1 applied it
	Duplicates  int            `json:"duplicates"`  // duplicate receipts absorbed for this processor
	Conflicts   int            `json:"conflicts"`   // receipts with a DIFFERENT terminal status after the first (never overwrite the first)
	Reason      string         `json:"reason,omitempty"`
	// Verified: the applied receipt's signature was verified against the
	// site's public key (see ServiceConfig.Verify).
	Verified bool `json:"verified,omitempty"`
}

// Completion is the KV record for one event: where and when it was
// published at L1 and which processors are expected to handle it (both
// filled in by the origin tracker), the first terminal status each
// processor reported, plus counters of the receipts absorbed after it.
//
// Status and Conflict are derived from the other fields on every write and
// again on every read, so records written by older versions (without them)
// read correctly. Missing and Overdue are computed when the record is read
// and never stored.
type Completion struct {
	EventID      string `json:"event_id"`
	OriginStream string `json:"origin_stream"`
	// Subject is the event's subject in the origin stream; empty until the
	// origin message has been seen.
	Subject string `json:"subject,omitempty"`
	// OriginSeq is the sequence of the event in the origin stream, for
	// operators only: identity is always event_id.
	OriginSeq uint64 `json:"origin_seq,omitempty"`
	// PublishedAt is the origin stream's timestamp of the event (when L1
	// stored it). Zero means the origin message has not been seen: the
	// expected processors are then unknown and the event stays pending.
	PublishedAt time.Time `json:"published_at,omitzero"`
	// Expected are the processors that should report, sorted; meaningful
	// only when PublishedAt is set. In leafline a processor is named after
	// its edge site.
	Expected   []string                   `json:"expected,omitempty"`
	Processors map[string]ProcessorRecord `json:"processors"`
	// Held are the receipts, per processor, that arrived while the origin
	// was unknown to a Store that holds them (StoreConfig.HoldUntilOrigin):
	// they count for nothing until the origin is seen, when those from
	// expected processors move to Processors and the others to Unexpected.
	Held map[string]ProcessorRecord `json:"held,omitempty"`
	// Unexpected are held receipts from processors the event turned out
	// not to be routed to. They never count; they are kept for audit.
	Unexpected map[string]ProcessorRecord `json:"unexpected,omitempty"`
	// PayloadSHA256 is PayloadDigest of the payload first published under
	// the event_id (empty for records written before it was kept).
	PayloadSHA256 string `json:"payload_sha256,omitempty"`
	// Reused are later origin messages that carried the same event_id with
	// another payload (see noteReuse): the first publication stands, and
	// the event is marked a conflict.
	Reused []OriginReuse `json:"reused,omitempty"`
	// Status is the overall status (derived).
	Status EventStatus `json:"status"`
	// Conflict is true when any processor sent a receipt whose status
	// differed from the first one it reported, or when the event_id was
	// reused with another payload (derived).
	Conflict  bool      `json:"conflict,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`

	// Missing are the expected processors that have not reported a
	// terminal status (read-time view, not stored).
	Missing []string `json:"missing,omitempty"`
	// Overdue is true when the event is pending, its origin is known and it
	// was published at least OverdueAfter ago (read-time view, not stored).
	Overdue bool `json:"overdue,omitempty"`
	// Cleaned points at the audit record of the origin message's deletion
	// by the cleaner (read-time view from Service.Get, not stored).
	Cleaned *AuditRef `json:"cleaned,omitempty"`
}

// OriginKnown reports whether the origin message of the event has been seen
// (PublishedAt and Expected are set).
func (c *Completion) OriginKnown() bool { return !c.PublishedAt.IsZero() }

// Derive recomputes Status and Conflict from the record and clears the
// read-time fields. Pure.
func (c *Completion) Derive() {
	c.Missing, c.Overdue, c.Cleaned = nil, false, nil
	c.Conflict = len(c.Reused) > 0
	dead, expired, retired := false, false, false
	for _, p := range c.Processors {
		c.Conflict = c.Conflict || p.Conflicts > 0
		dead = dead || p.Status == receipt.StatusDeadLettered
		expired = expired || p.Status == receipt.StatusExpired
		retired = retired || p.Status == StatusRetired
	}
	switch {
	case dead:
		c.Status = EventDeadLettered
	case expired:
		c.Status = EventExpired
	case !c.OriginKnown() && len(c.Processors) == 0 && len(c.Held) > 0:
		c.Status = EventOriginUnknown
	case !c.OriginKnown() || len(c.MissingProcessors()) > 0:
		c.Status = EventPending
	case retired:
		c.Status = EventRetired
	default:
		c.Status = EventComplete
	}
}

// MissingProcessors returns the expected processors without a terminal status; nil
// while the origin is unknown.
func (c *Completion) MissingProcessors() []string {
	if !c.OriginKnown() {
		return nil
	}
	var out []string
	for _, p := range c.Expected {
		if _, ok := c.Processors[p]; !ok {
			out = append(out, p)
		}
	}
	return out
}

// View derives Status, Conflict, Missing and Overdue as of now, as Get
// returns a record.
func (c *Completion) View(now time.Time, overdueAfter time.Duration) {
	c.Derive()
	c.Missing = c.MissingProcessors()
	c.Overdue = c.Status == EventPending && c.OriginKnown() && !now.Before(c.PublishedAt.Add(overdueAfter))
}

// Origin is what the origin tracker learned about an event from the origin
// stream.
type Origin struct {
	EventID     string
	Stream      string
	Subject     string
	Seq         uint64
	PublishedAt time.Time
	Expected    []string // processors; deduplicated and sorted by ApplyOrigin
	// Digest is PayloadDigest of the message's payload; empty: not known.
	Digest string
}

// Validate checks the event_id, the stream and processor names and that
// PublishedAt is set, reporting every problem wrapped in ErrInvalid.
func (o Origin) Validate() error {
	var errs []error
	if err := receipt.CheckEventID(o.EventID); err != nil {
		errs = append(errs, err)
	}
	if err := receipt.CheckName(o.Stream); err != nil {
		errs = append(errs, fmt.Errorf("stream: %w", err))
	}
	if o.PublishedAt.IsZero() {
		errs = append(errs, fmt.Errorf("published_at: must be set"))
	}
	for _, p := range o.Expected {
		if err := receipt.CheckName(p); err != nil {
			errs = append(errs, fmt.Errorf("expected processor %q: %w", receipt.TruncateUTF8(p, receipt.MaxNameLen), err))
		}
	}
	return receipt.Invalid(errs)
}

// OriginOutcome says what ApplyOrigin did.
type OriginOutcome int

// Outcomes of Store.ApplyOrigin.
const (
	// OriginCreated: no record existed; a pending record was created.
	OriginCreated OriginOutcome = iota + 1
	// OriginMerged: receipts had arrived first; the origin was merged into
	// their record, keeping everything they recorded.
	OriginMerged
	// OriginKnown: the record already knew its origin (a redelivery, or the
	// same event_id published again); nothing was written. The first
	// publication wins.
	OriginKnown
	// OriginReused: the record already knew its origin, and this message
	// carried its event_id with another payload; the reuse was recorded
	// (Completion.Reused). The first publication wins.
	OriginReused
)

// String returns "created", "merged", "known" or "reused".
func (o OriginOutcome) String() string {
	switch o {
	case OriginCreated:
		return "created"
	case OriginMerged:
		return "merged"
	case OriginKnown:
		return "known"
	case OriginReused:
		return "reused"
	}
	return fmt.Sprintf("OriginOutcome(%d)", int(o))
}

// mergeOrigin folds o into c unless c already knows its origin. It never
// changes a processor's record; it moves each held receipt to Processors
// if its processor is expected (and has no record yet) and to Unexpected
// otherwise. Pure.
func mergeOrigin(c *Completion, o Origin, now time.Time) OriginOutcome {
	if c.OriginKnown() {
		if noteReuse(c, o, now) {
			return OriginReused
		}
		return OriginKnown
	}
	if c.OriginStream == "" {
		c.OriginStream = o.Stream
	}
	c.PayloadSHA256 = o.Digest
	c.Subject = o.Subject
	c.OriginSeq = o.Seq
	c.PublishedAt = o.PublishedAt.UTC()
	c.Expected = NormalizeNames(o.Expected)
	c.UpdatedAt = now.UTC()
	releaseHeld(c)
	return OriginMerged
}

// normalizeNames returns a sorted copy of names without duplicates; never
// nil for a non-nil input.
func NormalizeNames(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

// Retirement closes an event for a processor whose site was retired: see
// FoldRetirement.
type Retirement struct {
	EventID string
	Site    string // the processor (a site) retired
	At      time.Time
	// Reason says who retired the site, how and when; it is kept in the
	// processor's record (ProcessorRecord.Reason), in the log.
	Reason string
}

// FoldRetirement records r in c: the processor r.Site gets StatusRetired
// when the event was routed to it and it has not reported. It reports
// whether c changed; an event whose origin is not known yet, or that the
// site has reported, is left as it is. Pure.
func (c *Completion) FoldRetirement(r Retirement) bool {
	if !slices.Contains(c.MissingProcessors(), r.Site) {
		return false
	}
	at := r.At.UTC()
	c.Processors[r.Site] = ProcessorRecord{Status: StatusRetired, Site: r.Site, ProcessedAt: at, ReceivedAt: at, Reason: r.Reason}
	c.UpdatedAt = at
	return true
}
