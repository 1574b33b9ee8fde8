package record

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leafline/leafline/receipt"
)

// ListStatus selects what List returns.
type ListStatus string

// List selections.
const (
	// ListPending: events whose status is pending or origin_unknown (with
	// Site: events the site has not reported yet, whatever their overall
	// status).
	ListPending ListStatus = "pending"
	// ListOverdue: pending events published at least OverdueAfter ago
	// (with Site: that site has not reported one published that long ago).
	ListOverdue ListStatus = "overdue"
	// ListDeadLettered: events with a dead_lettered receipt (with Site:
	// from that site).
	ListDeadLettered ListStatus = "dead_lettered"
	// ListExpired: events of status expired (with Site: with an expired
	// receipt from that site).
	ListExpired ListStatus = "expired"
	// ListConflict: events with a conflicting receipt (with Site: from
	// that site).
	ListConflict ListStatus = "conflict"
)

// Bounds of List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// MaxListScan bounds the index entries one List call reads, so a page
	// costs the same whatever the backlog; a page may then hold fewer than
	// Limit items and still have a next cursor.
	MaxListScan = 10_000
	// MaxCursorLen bounds the cursor string List accepts.
	MaxCursorLen = 256
	// MaxSummaryScan bounds the index entries each scan of Summary reads
	// (overdue counts, oldest pending, site discovery).
	MaxSummaryScan = 100_000
	// MaxSummarySites bounds the per-site rows of a Summary.
	MaxSummarySites = 1000
)

// ListQuery selects a page of List.
type ListQuery struct {
	// Status is required.
	Status ListStatus `json:"status"`
	// Site optionally restricts the list to one site (processor name).
	Site string `json:"site,omitempty"`
	// Limit is 1..MaxListLimit; zero = DefaultListLimit.
	Limit int `json:"limit,omitempty"`
	// After is the cursor returned with the previous page; empty = start.
	After string `json:"after,omitempty"`
}

// Validate fills a zero Limit and checks every field, reporting all
// problems wrapped in ErrBadQuery.
func (q *ListQuery) Validate() error {
	var errs []error
	switch q.Status {
	case ListPending, ListOverdue, ListDeadLettered, ListExpired, ListConflict:
	case "":
		errs = append(errs, errors.New("status: required (pending, overdue, dead_lettered, expired or conflict)"))
	default:
		errs = append(errs, fmt.Errorf("status: %q is not pending, overdue, dead_lettered, expired or conflict", receipt.TruncateUTF8(string(q.Status), 32)))
	}
	if q.Site != "" {
		if err := receipt.CheckName(q.Site); err != nil {
			errs = append(errs, fmt.Errorf("site: %w", err))
		}
	}
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	if q.Limit < 1 || q.Limit > MaxListLimit {
		errs = append(errs, fmt.Errorf("limit: must be 1..%d, got %d", MaxListLimit, q.Limit))
	}
	if q.After != "" && len(errs) == 0 {
		if _, err := DecodeCursorSeq(q.After, q.Status, q.Site); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrBadQuery, errors.Join(errs...))
}

// ParseListQuery reads a ListQuery from URL query parameters status, site,
// limit and after. Unknown, repeated or empty-valued parameters, a limit that
// is not a decimal integer, and a query over 4 KiB are errors wrapping
// ErrBadQuery. The result is validated.
func ParseListQuery(v url.Values) (ListQuery, error) {
	var q ListQuery
	var errs []error
	size := 0
	for key, vals := range v {
		size += len(key)
		for _, s := range vals {
			size += len(s)
		}
		switch {
		case key != "status" && key != "site" && key != "limit" && key != "after":
			errs = append(errs, fmt.Errorf("unknown parameter %q", receipt.TruncateUTF8(key, 32)))
		case len(vals) != 1:
			errs = append(errs, fmt.Errorf("%s: given %d times", key, len(vals)))
		case vals[0] == "":
			errs = append(errs, fmt.Errorf("%s: empty", key))
		}
	}
	if size > 4096 {
		return ListQuery{}, fmt.Errorf("%w: query parameters too long (%d bytes, limit 4096)", ErrBadQuery, size)
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return ListQuery{}, fmt.Errorf("%w: %w", ErrBadQuery, errors.Join(errs...))
	}
	q.Status, q.Site, q.After = ListStatus(v.Get("status")), v.Get("site"), v.Get("after")
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || len(s) > 6 || s[0] == '+' || s[0] == '-' {
			return ListQuery{}, fmt.Errorf("%w: limit: must be an integer 1..%d", ErrBadQuery, MaxListLimit)
		}
		if n == 0 {
			return ListQuery{}, fmt.Errorf("%w: limit: must be 1..%d, got 0", ErrBadQuery, MaxListLimit)
		}
		q.Limit = n
	}
	if err := q.Validate(); err != nil {
		return ListQuery{}, err
	}
	return q, nil
}

// Encode returns q as URL query parameters (the inverse of ParseListQuery).
func (q ListQuery) Encode() string {
	v := url.Values{}
	v.Set("status", string(q.Status))
	if q.Site != "" {
		v.Set("site", q.Site)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	return v.Encode()
}

// EncodeCursorSeq makes a cursor of a State that pages by stream sequence:
// base64url("1|<status>|<site>|<seq>"): the index stream
// sequence to continue from, bound to the query it came from.
func EncodeCursorSeq(status ListStatus, site string, seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("1|" + string(status) + "|" + site + "|" + strconv.FormatUint(seq, 10)))
}

// DecodeCursorSeq returns the sequence in cursor c, which must have been made
// for the same status and site (a cursor of EncodeCursorKey returns 0).
func DecodeCursorSeq(c string, status ListStatus, site string) (uint64, error) {
	version, pos, err := cursorPosition(c, status, site)
	if err != nil {
		return 0, err
	}
	if version == "2" {
		_, err := DecodeCursorKey(c, status, site)
		return 0, err
	}
	seq, err := strconv.ParseUint(pos, 10, 64)
	if err != nil || seq == 0 || pos != strconv.FormatUint(seq, 10) {
		return 0, errors.New("after: invalid cursor: bad position")
	}
	return seq, nil
}

// cursorPosition checks cursor c ("<version>|<status>|<site>|<position>",
// base64url) against the query's status and site and returns its version
// and position.
func cursorPosition(c string, status ListStatus, site string) (version, pos string, err error) {
	bad := func(why string) (string, string, error) { return "", "", fmt.Errorf("after: invalid cursor: %s", why) }
	if len(c) > MaxCursorLen {
		return bad("too long")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil {
		return bad("not base64url")
	}
	parts := strings.Split(string(b), "|")
	if len(parts) != 4 || (parts[0] != "1" && parts[0] != "2") {
		return bad("unknown format")
	}
	if parts[1] != string(status) || parts[2] != site {
		return bad("made for another status or site")
	}
	return parts[0], parts[3], nil
}

// EncodeCursorKey makes the cursor of a State that pages by key: pos is
// where the next page starts (opaque to the client), bound to the query's
// status and site like every cursor.
func EncodeCursorKey(status ListStatus, site string, pos []byte) string {
	return base64.RawURLEncoding.EncodeToString([]byte("2|" + string(status) + "|" + site + "|" + base64.RawURLEncoding.EncodeToString(pos)))
}

// DecodeCursorKey returns the position in a cursor made by EncodeCursorKey
// for the same status and site.
func DecodeCursorKey(c string, status ListStatus, site string) ([]byte, error) {
	version, p, err := cursorPosition(c, status, site)
	if err != nil {
		return nil, err
	}
	pos, err := base64.RawURLEncoding.Strict().DecodeString(p)
	if version != "2" || err != nil || len(pos) == 0 {
		return nil, errors.New("after: invalid cursor: bad position")
	}
	return pos, nil
}

// Summary is an overview of the completion store.
type Summary struct {
	GeneratedAt  time.Time `json:"generated_at"`
	OverdueAfter string    `json:"overdue_after"`
	// Events is the number of completion records.
	Events       int64 `json:"events"`
	Pending      int64 `json:"pending"`
	Complete     int64 `json:"complete"`
	DeadLettered int64 `json:"dead_lettered"`
	// Expired counts the events of status expired: terminal, never
	// pending, not complete.
	Expired  int64 `json:"expired"`
	Conflict int64 `json:"conflict"`
	Overdue  int64 `json:"overdue"`
	// Retired counts the events closed because a site they were routed
	// to was retired before it reported (EventRetired): terminal, not
	// complete.
	Retired int64 `json:"retired,omitempty"`
	// PendingOriginUnknown counts pending events whose origin message has
	// not been seen (receipts arrived first, or origin tracking is off),
	// events of status origin_unknown included; Pending includes them all.
	PendingOriginUnknown int64 `json:"pending_origin_unknown"`
	// Unidentified counts the origin messages without a usable event_id
	// (Service.Unidentified lists them); they are in no other count.
	Unidentified int64 `json:"unidentified"`
	// OldestPending is the pending event (with a known origin) published
	// first; nil when there is none.
	OldestPending *PendingAge `json:"oldest_pending,omitempty"`
	// Truncated is set when a scan hit MaxSummaryScan: Overdue,
	// PendingOriginUnknown and the per-site Overdue are then lower bounds
	// and OldestPending the oldest of the entries scanned.
	Truncated bool          `json:"truncated,omitempty"`
	Sites     []SiteSummary `json:"sites"`
	// Streams is how full each of L1's streams is against its limits, in
	// the order the service was configured with (a Service with
	// ServiceConfig.Streams; a Store alone leaves it empty). A stream that
	// does not exist, or whose info could not be read in time, is left
	// out: the list may be shorter than the configuration, never wrong.
	Streams []StreamFill `json:"streams,omitempty"`
	// Instance holds the counters of the service instance that answered
	// (since it started; receipts applied and duplicates absorbed), when
	// the answer came from a Service.
	Instance *Stats `json:"instance,omitempty"`
}

// SiteSummary is one site's row in a Summary. Pending counts events the
// site has not reported yet.
type SiteSummary struct {
	Site          string      `json:"site"`
	Pending       int64       `json:"pending"`
	Overdue       int64       `json:"overdue"`
	DeadLettered  int64       `json:"dead_lettered"`
	Expired       int64       `json:"expired"`
	Conflict      int64       `json:"conflict"`
	Retired       int64       `json:"retired,omitempty"`
	OldestPending *PendingAge `json:"oldest_pending,omitempty"`
}

// StreamFillWarning is the Fill from which a stream is reported as
// filling up (as the LeaflineStreamNearlyFull alert): at its limit a
// stream that discards new messages refuses what is published into it.
const StreamFillWarning = 0.8

// StreamFill is what one stream holds against its limits.
type StreamFill struct {
	Stream string `json:"stream"`
	Bytes  uint64 `json:"bytes"`
	Msgs   uint64 `json:"messages"`
	// MaxBytes and MaxMsgs are the stream's limits; zero or negative
	// means none.
	MaxBytes int64 `json:"max_bytes"`
	MaxMsgs  int64 `json:"max_messages"`
	// Fill is the larger of Bytes/MaxBytes and Msgs/MaxMsgs, 0..1 (1 also
	// when a lowered limit leaves the stream over it); 0 when the stream
	// has no limit.
	Fill float64 `json:"fill"`
}

// NewStreamFill returns the StreamFill of a stream holding bytes and
// msgs, with limits maxBytes and maxMsgs (<= 0: none), its Fill computed.
func NewStreamFill(stream string, bytes, msgs uint64, maxBytes, maxMsgs int64) StreamFill {
	f := StreamFill{Stream: stream, Bytes: bytes, Msgs: msgs, MaxBytes: maxBytes, MaxMsgs: maxMsgs}
	if maxBytes > 0 {
		f.Fill = float64(bytes) / float64(maxBytes)
	}
	if maxMsgs > 0 {
		f.Fill = max(f.Fill, float64(msgs)/float64(maxMsgs))
	}
	f.Fill = min(f.Fill, 1)
	return f
}

// Limited reports whether the stream has a byte or message limit.
func (f StreamFill) Limited() bool { return f.MaxBytes > 0 || f.MaxMsgs > 0 }

// BinarySize is n in the largest binary unit it reaches, whole or with
// one decimal, as stream limits are set: 512 B, 4 KiB, 61.2 MiB, 64 MiB.
func BinarySize(n uint64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	u, d := 0, uint64(1<<10)
	for u < len(units)-1 && n >= d<<10 {
		u, d = u+1, d<<10
	}
	if n%d == 0 {
		return fmt.Sprintf("%d %s", n/d, units[u])
	}
	return fmt.Sprintf("%.1f %s", float64(n)/float64(d), units[u])
}

// Percent is Fill in whole percent, rounded down (a stream at 99.6% is
// not full): it reads 80 where Filling turns true.
func (f StreamFill) Percent() int { return int(f.Fill*100 + 1e-9) }

// Filling reports whether the stream has a limit and is at
// StreamFillWarning of it or more.
func (f StreamFill) Filling() bool { return f.Limited() && f.Fill >= StreamFillWarning }

// PendingAge names a pending event and how long ago it was published.
type PendingAge struct {
	EventID     string    `json:"event_id"`
	PublishedAt time.Time `json:"published_at"`
	AgeSeconds  float64   `json:"age_seconds"`
}

// Offer returns the older of p and the pending event id published at at
// (p itself when it is not younger).
func (p *PendingAge) Offer(id string, at, now time.Time) *PendingAge {
	if p != nil && !at.Before(p.PublishedAt) {
		return p
	}
	return &PendingAge{EventID: id, PublishedAt: at, AgeSeconds: now.Sub(at).Seconds()}
}

// StatusSource answers status queries. *Store, *Service and *StatusClient
// implement it; NewHTTPHandler and StartMicro serve one.
type StatusSource interface {
	Get(ctx context.Context, eventID string) (Completion, error)
	List(ctx context.Context, q ListQuery) ([]Completion, string, error)
	Summary(ctx context.Context) (Summary, error)
}
