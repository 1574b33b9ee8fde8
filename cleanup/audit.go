package cleanup

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Audit defaults.
const (
	// DefaultAuditStream holds one AuditRecord per origin message the
	// cleaner deleted.
	DefaultAuditStream = "LEAFLINE_AUDIT"
	// DefaultAuditSubject is the audit records' subject prefix; a record is
	// stored on "<prefix>.<base64url(event_id)>.<origin sequence>".
	DefaultAuditSubject = "leafline.audit"
	// DefaultAuditMaxAge is how long the audit stream keeps a record.
	DefaultAuditMaxAge = 90 * 24 * time.Hour
	// DefaultAuditMaxBytes bounds the audit stream: past it, the oldest
	// records go (about 1.5 million records a GiB).
	DefaultAuditMaxBytes = 1 << 30
	// auditDuplicates is the audit stream's Nats-Msg-Id window, the
	// shortest the server takes: records carry no Nats-Msg-Id (each is
	// published expecting its subject empty, which holds for ever), and
	// a window costs memory per record.
	auditDuplicates = time.Second
	// auditBatch is the records of one atomic batch.
	auditBatch = 500
	// auditTimeout bounds the PubAcks of one batch of records.
	auditTimeout = 10 * time.Second
	// auditVersion is the AuditRecord schema version.
	auditVersion = 1
)

// AuditRecord is the durable statement, written and PubAck'ed before the
// delete, that the cleaner deleted one origin message and why.
type AuditRecord struct {
	V       int    `json:"v"`
	EventID string `json:"event_id"`
	Stream  string `json:"origin_stream"`
	Subject string `json:"subject"`
	// Seq is the message's sequence in the origin stream: the one the
	// origin tracker recorded, or, with RedriveCopy, a redrive copy's.
	Seq         uint64    `json:"origin_seq"`
	RedriveCopy bool      `json:"redrive_copy,omitempty"`
	PublishedAt time.Time `json:"published_at"` // the deleted message's stream timestamp
	Bytes       int64     `json:"bytes"`        // its payload and header bytes
	// Receipts are the terminal statuses that justified the delete, one
	// per processor the event was routed to.
	Receipts []AuditReceipt `json:"receipts"`
	// Policy names the rule applied (see CleanupConfig.policy).
	Policy    string    `json:"policy"`
	DeletedBy string    `json:"deleted_by"`
	DecidedAt time.Time `json:"decided_at"`
}

// AuditReceipt is one processor's terminal status as the completion record
// held it when the cleaner decided.
type AuditReceipt struct {
	Processor  string         `json:"processor"`
	Site       string         `json:"site"`
	Status     receipt.Status `json:"status"`
	ReceiptID  string         `json:"receipt_id"`
	Verified   bool           `json:"signature_verified"`
	ReceivedAt time.Time      `json:"received_at"`
}

// auditLog reads and writes audit records.
type auditLog struct {
	js       jetstream.JetStream
	stream   string
	prefix   string
	maxAge   time.Duration
	maxBytes int64
	replicas int
	// single is set once the stream refused an atomic batch for good
	// (AllowAtomicPublish off): records then go one by one.
	single atomic.Bool
}

// subject is the record's subject for (eventID, seq): exact, so a lookup
// is one direct get.
func (a *auditLog) subject(eventID string, seq uint64) string {
	return a.prefix + "." + idToken(eventID) + "." + strconv.FormatUint(seq, 10)
}

// ensure creates the audit stream if absent, and checks an existing one
// takes the audit subjects.
func (a *auditLog) ensure(ctx context.Context) error {
	st, err := a.js.Stream(ctx, a.stream)
	if err == nil {
		if !slices.Contains(st.CachedInfo().Config.Subjects, a.prefix+".>") {
			return fmt.Errorf("receipts: audit stream %s exists without subject %s.>: %w", a.stream, a.prefix, record.ErrIncompatible)
		}
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("receipts: audit stream %s: %w", a.stream, err)
	}
	_, err = a.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        a.stream,
		Description: "leafline: one record per origin message deleted by the cleaner, written before the delete",
		Subjects:    []string{a.prefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		// Past its limits the oldest records go: the record of a delete
		// is always written before it, and a full audit stream must not
		// stop the deletes that keep the origin stream taking events.
		Discard:            jetstream.DiscardOld,
		MaxAge:             a.maxAge,
		MaxBytes:           a.maxBytes,
		Duplicates:         min(auditDuplicates, a.maxAge),
		Replicas:           a.replicas,
		AllowDirect:        true,
		AllowAtomicPublish: true,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("receipts: create audit stream %s: %w", a.stream, err)
	}
	return nil
}

// writeAll publishes recs and waits for their PubAcks, in atomic batches
// (one disk flush each under SyncAlways); errs[i] says why recs[i] is not
// written. Each record's subject names the event and the sequence, and
// its publish expects that subject empty: a record that an earlier pass
// or another cleaner wrote is never written twice, however long ago, and
// counts as written. A batch the stream refuses whole (one of its records
// written before, or no atomic publish) is published one by one.
func (a *auditLog) writeAll(ctx context.Context, recs []*AuditRecord) (errs []error) {
	errs = make([]error, len(recs))
	// A record not PubAck'ed in time is not written: its message is
	// kept, and the next pass writes it again (or finds it written).
	ctx, cancel := context.WithTimeout(ctx, auditTimeout+time.Duration(len(recs)/auditBatch)*auditTimeout)
	defer cancel()
	msgs := make([]*nats.Msg, len(recs))
	for i, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			errs[i] = err
			continue
		}
		m := nats.NewMsg(a.subject(r.EventID, r.Seq))
		m.Data = b
		msgs[i] = m
	}
	for start := 0; start < len(msgs); start += auditBatch {
		end := min(start+auditBatch, len(msgs))
		if a.batch(ctx, msgs[start:end], errs[start:end]) {
			continue
		}
		a.each(ctx, msgs[start:end], errs[start:end])
	}
	return errs
}

// batch publishes msgs as one atomic batch and reports whether it was
// stored; false leaves errs to each.
func (a *auditLog) batch(ctx context.Context, msgs []*nats.Msg, errs []error) bool {
	if a.single.Load() || len(msgs) < 2 || slices.Contains(msgs, nil) {
		return false
	}
	batch := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		// The batch publish adds its headers to what it sends.
		c := nats.NewMsg(m.Subject)
		c.Data = m.Data
		c.Header.Set(jetstream.ExpectedStreamHeader, a.stream)
		c.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		batch[i] = c
	}
	_, err := jetstreamext.PublishMsgBatch(ctx, a.js, batch, jetstreamext.BatchFlowControl{})
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishNotEnabled {
		a.single.Store(true)
	}
	return err == nil
}

// each publishes msgs one by one, pipelined, and fills errs.
func (a *auditLog) each(ctx context.Context, msgs []*nats.Msg, errs []error) {
	futs := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		if m == nil {
			continue
		}
		f, err := a.js.PublishMsgAsync(m, jetstream.WithExpectStream(a.stream), jetstream.WithExpectLastSequencePerSubject(0))
		if err != nil {
			errs[i] = fmt.Errorf("receipts: audit record %s: %w", m.Subject, err)
			continue
		}
		futs[i] = f
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
				apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
				continue // written before
			}
			errs[i] = fmt.Errorf("receipts: audit record %s: %w", msgs[i].Subject, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("receipts: audit record %s: no PubAck: %w", msgs[i].Subject, ctx.Err())
		}
	}
}

// lookup returns the record for (eventID, seq); nil, nil if there is none.
func (a *auditLog) lookup(ctx context.Context, eventID string, seq uint64) (*AuditRecord, *record.AuditRef, error) {
	st, err := a.js.Stream(ctx, a.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, nil // no cleaner has run yet
	}
	if err != nil {
		return nil, nil, fmt.Errorf("receipts: audit stream %s: %w", a.stream, err)
	}
	raw, err := st.GetLastMsgForSubject(ctx, a.subject(eventID, seq))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("receipts: audit lookup: %w", err)
	}
	return a.decode(raw.Data, raw.Subject, raw.Sequence)
}

func (a *auditLog) decode(data []byte, subject string, seq uint64) (*AuditRecord, *record.AuditRef, error) {
	var r AuditRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, nil, fmt.Errorf("receipts: audit record %s#%d: %w", a.stream, seq, err)
	}
	return &r, &record.AuditRef{Stream: a.stream, Seq: seq, Subject: subject, DeletedBy: r.DeletedBy, DecidedAt: r.DecidedAt}, nil
}

// AuditEntry is one audit record with where it is stored.
type AuditEntry struct {
	Ref    record.AuditRef `json:"ref"`
	Record AuditRecord     `json:"record"`
}

// list returns every audit record of eventID, in the order written.
func (a *auditLog) list(ctx context.Context, eventID string) ([]AuditEntry, error) {
	oc, err := a.js.OrderedConsumer(ctx, a.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{a.prefix + "." + idToken(eventID) + ".*"},
	})
	if err != nil {
		return nil, fmt.Errorf("receipts: audit stream %s: %w", a.stream, err)
	}
	var out []AuditEntry
	for {
		batch, err := oc.FetchNoWait(64)
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			r, ref, err := a.decode(m.Data(), m.Subject(), meta.Sequence.Stream)
			if err != nil {
				return nil, err
			}
			out = append(out, AuditEntry{Ref: *ref, Record: *r})
			if meta.NumPending == 0 {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
	}
}

// idToken is the subject token of an event_id: unpadded base64url.
func idToken(eventID string) string { return base64.RawURLEncoding.EncodeToString([]byte(eventID)) }
