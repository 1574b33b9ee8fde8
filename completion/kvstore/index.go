package kvstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// The status index is a second KV bucket whose keys say which events are
// in which state (see the package documentation, "Status index"). Every key
// has three tokens, <kind>.<site>.<tok>:
//
//	p.=.<tok>       event pending
//	p.<site>.<tok>  expected processor <site> has not reported
//	d.=.<tok>       event dead_lettered
//	d.<site>.<tok>  processor <site> reported dead_lettered
//	c.=.<tok>       event has a conflict
//	c.<site>.<tok>  processor <site> has a conflict
//
// "=" cannot be a site name, so it marks the event's own entry; <tok> is
// base64.RawURLEncoding(event_id), as in KVKey. Because <tok> is always the
// third token, "p.*.<tok>" selects every pending entry of one event (removed
// with one purge when the event is fully reported). Values are the event's
// published_at (RFC 3339, empty when unknown).
type idxKind string

const (
	kindPending  idxKind = "p"
	kindDead     idxKind = "d"
	kindConflict idxKind = "c"
	kindExpired  idxKind = "x"
	// eventLevel is the site token of an event's own entry.
	eventLevel = "="
)

// idxKey is one index key of one event, without the event's token.
type idxKey struct {
	kind idxKind
	site string // eventLevel for the event's own entry
}

func eventKey(k idxKind) idxKey          { return idxKey{kind: k, site: eventLevel} }
func siteKey(k idxKind, s string) idxKey { return idxKey{kind: k, site: s} }

// String returns the key prefix "<kind>.<site>".
func (k idxKey) String() string { return string(k.kind) + "." + k.site }

// key returns the KV key of k for the event whose token is tok.
func (k idxKey) key(tok string) string { return k.String() + "." + tok }

func idToken(eventID string) string { return base64.RawURLEncoding.EncodeToString([]byte(eventID)) }

// parseIndexKey splits an index KV key into its idxKey and event_id.
func parseIndexKey(key string) (idxKey, string, error) {
	bad := func(format string, args ...any) (idxKey, string, error) {
		return idxKey{}, "", fmt.Errorf("index key %q: %s", receipt.TruncateUTF8(key, 80), fmt.Sprintf(format, args...))
	}
	parts := strings.Split(key, ".")
	if len(parts) != 3 {
		return bad("wrong shape")
	}
	k := idxKey{kind: idxKind(parts[0]), site: parts[1]}
	switch k.kind {
	case kindPending, kindDead, kindExpired, kindConflict:
	default:
		return bad("unknown kind")
	}
	if k.site != eventLevel {
		if err := receipt.CheckName(k.site); err != nil {
			return bad("site: %v", err)
		}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(parts[2]) // canonical only
	if err != nil {
		return bad("event token: %v", err)
	}
	id := string(b)
	if err := receipt.CheckEventID(id); err != nil {
		return bad("%v", err)
	}
	return k, id, nil
}

// indexKeys returns the index keys that describe c, sorted. c must have
// been derived.
func indexKeys(c *record.Completion) []idxKey {
	var out []idxKey
	switch c.Status {
	case record.EventPending, record.EventOriginUnknown: // origin_unknown lists and counts as pending
		out = append(out, eventKey(kindPending))
	case record.EventDeadLettered:
		out = append(out, eventKey(kindDead))
	case record.EventExpired:
		out = append(out, eventKey(kindExpired))
	}
	if c.Conflict {
		out = append(out, eventKey(kindConflict))
	}
	for _, p := range c.MissingProcessors() {
		out = append(out, siteKey(kindPending, p))
	}
	for name, p := range c.Processors {
		if p.Status == receipt.StatusDeadLettered {
			out = append(out, siteKey(kindDead, name))
		}
		if p.Status == receipt.StatusExpired {
			out = append(out, siteKey(kindExpired, name))
		}
		if p.Conflicts > 0 {
			out = append(out, siteKey(kindConflict, name))
		}
	}
	slices.SortFunc(out, func(a, b idxKey) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// permanentlyFalse reports whether k can never again describe the event
// whose current record is c, so that removing it can never race with a
// writer that needs it. Statuses are monotonic: a processor's first terminal
// status is never overwritten, the expected set is written once, and an event
// that stopped being pending never becomes pending again. Dead-letter and
// conflict flags of the event, and conflict flags of a processor, can still
// become true later, so they are never reported as permanently false.
func permanentlyFalse(c *record.Completion, k idxKey) bool {
	switch {
	case k.kind == kindPending && k.site == eventLevel:
		return c.Status != record.EventPending && c.Status != record.EventOriginUnknown
	case k.kind == kindPending:
		if !c.OriginKnown() {
			return false
		}
		_, reported := c.Processors[k.site]
		return reported || !slices.Contains(c.Expected, k.site)
	case k.kind == kindDead && k.site != eventLevel:
		p, ok := c.Processors[k.site]
		return ok && p.Status != receipt.StatusDeadLettered
	case k.kind == kindExpired && k.site != eventLevel:
		p, ok := c.Processors[k.site]
		return ok && p.Status != receipt.StatusExpired
	}
	return false
}

// allPendingGone reports whether every pending entry of the event, whatever
// its site, is permanently false (so "p.*.<tok>" may be purged at once).
func allPendingGone(c *record.Completion) bool {
	return c.OriginKnown() && c.Status != record.EventPending && len(c.MissingProcessors()) == 0
}

// member reports whether c (viewed at some time) is described by k; for
// the overdue variant, see Store.verify.
func member(c *record.Completion, k idxKey) bool {
	if k.site == eventLevel {
		switch k.kind {
		case kindPending:
			return c.Status == record.EventPending || c.Status == record.EventOriginUnknown
		case kindDead:
			return c.Status == record.EventDeadLettered
		case kindExpired:
			return c.Status == record.EventExpired
		case kindConflict:
			return c.Conflict
		}
		return false
	}
	p, ok := c.Processors[k.site]
	switch k.kind {
	case kindPending:
		return slices.Contains(c.Missing, k.site)
	case kindDead:
		return ok && p.Status == receipt.StatusDeadLettered
	case kindExpired:
		return ok && p.Status == receipt.StatusExpired
	case kindConflict:
		return ok && p.Conflicts > 0
	}
	return false
}

// index is the status index bucket.
type index struct {
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	stream  jetstream.Stream
	subject string // "$KV.<bucket>."
}

func newIndex(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) (*index, error) {
	name := "KV_" + kv.Bucket()
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("index stream %s: %w", name, err)
	}
	if !st.CachedInfo().Config.AllowDirect {
		return nil, fmt.Errorf("index bucket %s: direct get is disabled: %w", kv.Bucket(), record.ErrIncompatible)
	}
	return &index{kv: kv, js: js, stream: st, subject: "$KV." + kv.Bucket() + "."}, nil
}

func publishedValue(c *record.Completion) []byte {
	if !c.OriginKnown() {
		return []byte{}
	}
	return []byte(c.PublishedAt.UTC().Format(time.RFC3339Nano))
}

// parsePublished reads an index value; ok is false when it holds no time.
func parsePublished(v []byte) (time.Time, bool) {
	if len(v) == 0 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(v))
	return t, err == nil
}

func (ix *index) put(ctx context.Context, key string, val []byte) error {
	if _, err := ix.kv.Put(ctx, key, val); err != nil {
		return fmt.Errorf("receipts: index put %s: %w", receipt.TruncateUTF8(key, 80), err)
	}
	return nil
}

// create writes key unless it exists (an existing value is kept).
func (ix *index) create(ctx context.Context, key string, val []byte) error {
	if _, err := ix.kv.Create(ctx, key, val); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("receipts: index create %s: %w", receipt.TruncateUTF8(key, 80), err)
	}
	return nil
}

// remove purges key (which may contain wildcards) from the index stream.
// Unlike a KV delete it leaves no marker, so counts and scans see only live
// entries. Under SyncAlways a purge is one disk flush however many entries
// it removes; KV markers are not cheaper: a marker with a Nats-TTL is
// removed on expiry with a flush of its own, and one without stays in the
// stream and is counted (BenchmarkIndexRemoval compares them).
func (ix *index) remove(ctx context.Context, key string) error {
	if err := ix.stream.Purge(ctx, jetstream.WithPurgeSubject(ix.subject+key)); err != nil {
		return fmt.Errorf("receipts: index remove %s: %w", receipt.TruncateUTF8(key, 80), err)
	}
	return nil
}

// idxEntry is one index entry read by a scan.
type idxEntry struct {
	Key   string // KV key
	Seq   uint64 // stream sequence: the scan position
	Value []byte
}

// batch returns up to n live entries whose key matches filter (a KV key
// pattern, wildcards allowed) from stream sequence seq on, in sequence
// order, with one batched direct get. more reports whether further matching
// entries existed after the last one returned when the server answered.
func (ix *index) batch(ctx context.Context, filter string, seq uint64, n int) (ents []idxEntry, more bool, err error) {
	it, err := jetstreamext.GetBatch(ctx, ix.js, ix.stream.CachedInfo().Config.Name, n,
		jetstreamext.GetBatchSeq(max(seq, 1)), jetstreamext.GetBatchSubject(ix.subject+filter),
		jetstreamext.GetBatchMaxBytes(1<<20))
	if err != nil {
		return nil, false, fmt.Errorf("receipts: index scan: %w", err)
	}
	var pending uint64
	for m, err := range it {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return ents, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("receipts: index scan: %w", err)
		}
		pending, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
		if op := m.Header.Get("KV-Operation"); op != "" { // a KV delete/purge marker written by hand
			ents = append(ents, idxEntry{Seq: m.Sequence})
			continue
		}
		ents = append(ents, idxEntry{Key: strings.TrimPrefix(m.Subject, ix.subject), Seq: m.Sequence, Value: m.Data})
	}
	return ents, pending > 0 && len(ents) > 0, nil
}

// count returns the number of live entries whose key matches filter.
func (ix *index) count(ctx context.Context, filter string) (int64, error) {
	it, err := jetstreamext.GetBatch(ctx, ix.js, ix.stream.CachedInfo().Config.Name, 1,
		jetstreamext.GetBatchSubject(ix.subject+filter))
	if err != nil {
		return 0, fmt.Errorf("receipts: index count: %w", err)
	}
	var n int64
	for m, err := range it {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("receipts: index count: %w", err)
		}
		p, perr := strconv.ParseInt(m.Header.Get("Nats-Num-Pending"), 10, 64)
		if perr != nil {
			return 0, fmt.Errorf("receipts: index count: bad Nats-Num-Pending: %w", perr)
		}
		n = p + 1
	}
	return n, nil
}
