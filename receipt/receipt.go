package receipt

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// SchemaVersion is the receipt format version written by this package and
// the only one Decode accepts.
const SchemaVersion = 1

// Limits checked by Validate.
const (
	// MaxEventIDLen is the default bound on event_id length in bytes.
	MaxEventIDLen = 512
	// MaxNameLen bounds origin_stream, processor and site, in bytes.
	MaxNameLen = 64
	// MaxReasonLen bounds reason, in bytes.
	MaxReasonLen = 1024
)

// Status is the terminal outcome a processor reports for an event.
type Status string

// Terminal statuses.
const (
	// StatusProcessed: the processor finished the event successfully.
	StatusProcessed Status = "processed"
	// StatusDeadLettered: the processor gave up on the event and wrote a
	// dead-letter record for it.
	StatusDeadLettered Status = "dead_lettered"
	// StatusExpired: the event was older than its expiry when the
	// processor reached it, so it was never handed to the sink (see
	// Deadline). Like dead_lettered it is terminal: the event will not be
	// processed.
	StatusExpired Status = "expired"
)

// Valid reports whether s is one of the defined statuses.
func (s Status) Valid() bool {
	return s == StatusProcessed || s == StatusDeadLettered || s == StatusExpired
}

// Receipt is a processor's durable statement that it reached a terminal
// status for one event. See the package documentation for the wire format.
type Receipt struct {
	Version      int       `json:"v"`
	ReceiptID    string    `json:"receipt_id"` // canonical lowercase UUID (v7 from New)
	EventID      string    `json:"event_id"`
	OriginStream string    `json:"origin_stream"`
	Processor    string    `json:"processor"`
	Site         string    `json:"site"`
	Status       Status    `json:"status"`
	ProcessedAt  time.Time `json:"processed_at"`
	Reason       string    `json:"reason,omitempty"` // safe reason for dead_lettered or expired; never a payload
	// PayloadSHA256 is PayloadDigest of the event's payload as the
	// processor received it (optional): a processor that finds its receipt
	// for the event_id already stored with another digest knows the id was
	// reused for another payload.
	PayloadSHA256 string `json:"payload_sha256,omitempty"`
	// Verified is set by the Service when the receipt's signature was
	// checked against its site's key. It is not part of the wire format.
	Verified bool `json:"-"`
}

// New returns a receipt with a fresh version 7 receipt_id and
// ProcessedAt = now in UTC (a zero now means time.Now()). It does not
// validate; Encode does. Set Reason on the result for dead-lettered events.
func New(eventID, originStream, processor, site string, status Status, now time.Time) Receipt {
	if now.IsZero() {
		now = time.Now()
	}
	id, err := uuid.NewV7()
	if err != nil {
		id = uuid.New() // v4; only if the clock or entropy source failed
	}
	return Receipt{
		Version:      SchemaVersion,
		ReceiptID:    id.String(),
		EventID:      eventID,
		OriginStream: originStream,
		Processor:    processor,
		Site:         site,
		Status:       status,
		ProcessedAt:  now.UTC(),
	}
}

// Validate checks every field and reports all problems at once, wrapped in
// ErrInvalid:
//   - v equals SchemaVersion;
//   - receipt_id is a non-nil UUID in canonical lowercase 8-4-4-4-12 form;
//   - event_id is non-empty, at most MaxEventIDLen bytes, valid UTF-8, no NUL;
//   - origin_stream, processor and site are 1..MaxNameLen bytes of [A-Za-z0-9_-];
//   - status is valid; processed_at is not zero;
//   - reason is valid UTF-8 of at most MaxReasonLen bytes.
func (r Receipt) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if r.Version != SchemaVersion {
		add("v: unsupported version %d (want %d)", r.Version, SchemaVersion)
	}
	if u, err := uuid.Parse(r.ReceiptID); err != nil || u == uuid.Nil || u.String() != r.ReceiptID {
		add("receipt_id: not a canonical lowercase UUID")
	}
	if err := CheckEventID(r.EventID); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct{ name, v string }{
		{"origin_stream", r.OriginStream}, {"processor", r.Processor}, {"site", r.Site},
	} {
		if err := CheckName(f.v); err != nil {
			add("%s: %v", f.name, err)
		}
	}
	if !r.Status.Valid() {
		add("status: must be %q, %q or %q", StatusProcessed, StatusDeadLettered, StatusExpired)
	}
	if r.ProcessedAt.IsZero() {
		add("processed_at: must be set")
	}
	if len(r.Reason) > MaxReasonLen {
		add("reason: %d bytes, limit %d", len(r.Reason), MaxReasonLen)
	} else if !utf8.ValidString(r.Reason) {
		add("reason: not valid UTF-8")
	}
	if r.PayloadSHA256 != "" && !isDigest(r.PayloadSHA256) {
		add("payload_sha256: not 64 lowercase hex digits")
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
}

// CheckEventID reports the first rule an event_id breaks (see
// ValidateEventID, which wraps it in ErrInvalid).
func CheckEventID(id string) error {
	switch {
	case id == "":
		return errors.New("event_id: empty")
	case len(id) > MaxEventIDLen:
		return fmt.Errorf("event_id: %d bytes, limit %d", len(id), MaxEventIDLen)
	case !utf8.ValidString(id):
		return errors.New("event_id: not valid UTF-8")
	case strings.IndexByte(id, 0) >= 0:
		return errors.New("event_id: contains NUL")
	}
	return nil
}

// CheckName reports the first rule a name (origin_stream, processor,
// site) breaks.
func CheckName(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%d bytes, limit %d", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return errors.New("only [A-Za-z0-9_-] allowed")
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// MsgID returns the Nats-Msg-Id for publishing r:
//
//	"rcpt-" + ordered64(event_id[:24]) + "." + ordered64(sha256(event_id + "\x00" + processor + "\x00" + status))
//
// It depends only on what the receipt asserts, never on receipt_id,
// processed_at or any stream sequence, so the same assertion republished by
// another process, after a restart, or re-sourced at another hop gets the same
// id and is dropped by the stream's duplicate window. event_id and processor
// cannot contain NUL in a valid receipt, so the hashed encoding is
// unambiguous, and the hash alone tells assertions apart.
//
// The prefix keeps the order of event ids: ordered64 is base64 over an
// alphabet in ASCII order, so ids that sort together (time-ordered ids
// such as UUIDv7, ULID or sequence numbers) give MsgIDs that sort
// together. The edge's outbox stores each receipt under its MsgID in a
// B+tree; with such ids a batch of receipts lands in a few leaf pages at
// the end of the tree instead of a page each (see the edge's doc.go).
func (r Receipt) MsgID() string {
	h := sha256.New()
	h.Write([]byte(r.EventID))
	h.Write([]byte{0})
	h.Write([]byte(r.Processor))
	h.Write([]byte{0})
	h.Write([]byte(r.Status))
	prefix := r.EventID
	if len(prefix) > msgIDPrefixLen {
		prefix = prefix[:msgIDPrefixLen]
	}
	return "rcpt-" + ordered64.EncodeToString([]byte(prefix)) + "." + ordered64.EncodeToString(h.Sum(nil))
}

// msgIDPrefixLen is how many leading bytes of event_id a MsgID keeps
// (encoded): enough for the time part of common time-ordered ids.
const msgIDPrefixLen = 24

// ordered64 is unpadded base64 whose alphabet is in ASCII order, so that
// encodings of equal-length inputs sort as the inputs do.
var ordered64 = base64.NewEncoding("-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz").WithPadding(base64.NoPadding)

// ValidateEventID reports whether id is a usable event_id: non-empty, at
// most MaxEventIDLen bytes, valid UTF-8, no NUL. Any such id round-trips
// through a receipt, the KV key and the status API.
func ValidateEventID(id string) error {
	if err := CheckEventID(id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
