package receipts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// An origin message without a usable event_id (none, empty, too long, not
// valid UTF-8) can never be tracked or completed: no receipt can name it.
// NATS cannot refuse it at publish time (a stream has no rule that requires
// a header), so the tracker records each one, before it ACKs the message,
// in the KV bucket "<Bucket>_unidentified" under "<stream>.<seq>": counted
// in Summary.Unidentified and listed by Service.Unidentified (the status
// service's "unidentified" endpoint, GET /v1/unidentified). The record
// never holds the payload; the message itself stays in the origin stream
// at that sequence.

// UnidentifiedBucketSuffix is appended to the completion bucket's name to
// name the bucket of unidentified origin messages.
const UnidentifiedBucketSuffix = "_unidentified"

// Unidentified describes an origin message the tracker could not identify.
type Unidentified struct {
	Stream      string    `json:"stream"`
	Seq         uint64    `json:"seq"`
	Subject     string    `json:"subject"`
	PublishedAt time.Time `json:"published_at"`
	Size        int       `json:"size"`
	// Reason says why it has no usable event_id; never the payload.
	Reason     string    `json:"reason"`
	RecordedAt time.Time `json:"recorded_at"`
}

// UnidentifiedPage is one page of Unidentified records, oldest first; Next
// is the cursor of the following page ("" at the end).
type UnidentifiedPage struct {
	Items []Unidentified `json:"items"`
	Next  string         `json:"next,omitempty"`
}

// unidentifiedKV holds the bucket once the tracker has opened it.
type unidentifiedKV struct {
	kv atomic.Pointer[jetstream.KeyValue]
}

// ensureUnidentified opens (creating if absent) the bucket.
func (s *Service) ensureUnidentified(ctx context.Context) error {
	if s.unidentified.kv.Load() != nil {
		return nil
	}
	name := s.cfg.Bucket + UnidentifiedBucketSuffix
	kv, err := openBucket(ctx, s.cfg.JS, name, "leafline origin messages without a usable event_id", true, s.cfg.Replicas, 1)
	if err != nil {
		return fmt.Errorf("receipts: setup: %w", err)
	}
	s.unidentified.kv.CompareAndSwap(nil, &kv)
	return nil
}

// recordUnidentified stores the record of an origin message without a
// usable event_id; a record already stored (a redelivery) is kept.
func (s *Service) recordUnidentified(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, cause error) error {
	kvp := s.unidentified.kv.Load()
	if kvp == nil {
		return errors.New("receipts: the unidentified bucket is not open")
	}
	u := Unidentified{
		Stream: meta.Stream, Seq: meta.Sequence.Stream, Subject: msg.Subject(),
		PublishedAt: meta.Timestamp.UTC(), Size: len(msg.Data()),
		Reason: truncateUTF8(cause.Error(), MaxReasonLen), RecordedAt: time.Now().UTC(),
	}
	b, err := json.Marshal(u)
	if err != nil {
		return err
	}
	_, err = (*kvp).Create(ctx, unidentifiedKey(u.Stream, u.Seq), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("receipts: record unidentified origin message: %w", err)
	}
	return nil
}

func unidentifiedKey(stream string, seq uint64) string {
	return stream + "." + strconv.FormatUint(seq, 10)
}

// UnidentifiedCount is the number of recorded origin messages without a
// usable event_id (0 before the tracker opened its bucket).
func (s *Service) UnidentifiedCount(ctx context.Context) (int64, error) {
	kvp := s.unidentified.kv.Load()
	if kvp == nil {
		return 0, nil
	}
	st, err := (*kvp).Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("receipts: unidentified: %w", err)
	}
	return int64(st.Values()), nil
}

// Unidentified lists the recorded origin messages without a usable
// event_id in the order they were recorded, at most limit (1..MaxListLimit)
// after the cursor (a page's Next; "" = from the start).
func (s *Service) Unidentified(ctx context.Context, after string, limit int) (UnidentifiedPage, error) {
	if limit < 1 || limit > MaxListLimit {
		return UnidentifiedPage{}, fmt.Errorf("%w: limit must be 1..%d, got %d", ErrInvalid, MaxListLimit, limit)
	}
	var from uint64 = 1
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			return UnidentifiedPage{}, fmt.Errorf("%w: after: not a cursor from a previous page", ErrInvalid)
		}
		from = n + 1
	}
	page := UnidentifiedPage{Items: []Unidentified{}}
	kvp := s.unidentified.kv.Load()
	if kvp == nil {
		if s.State() == nil {
			return page, ErrNotReady
		}
		return page, nil
	}
	stream, err := s.cfg.JS.Stream(ctx, kvStreamPrefix+(*kvp).Bucket())
	if err != nil {
		return page, fmt.Errorf("receipts: unidentified: %w", err)
	}
	// One bucket entry per message of the bucket's stream; the stream
	// sequence is the cursor.
	for seq := from; len(page.Items) <= limit; {
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("$KV."+(*kvp).Bucket()+".>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			page.Next = ""
			return page, nil
		}
		if err != nil {
			return page, fmt.Errorf("receipts: unidentified: %w", err)
		}
		if len(page.Items) == limit {
			page.Next = strconv.FormatUint(m.Sequence-1, 10)
			return page, nil
		}
		var u Unidentified
		if err := json.Unmarshal(m.Data, &u); err == nil {
			page.Items = append(page.Items, u)
		}
		seq = m.Sequence + 1
	}
	return page, nil
}

// UnidentifiedSource lists unidentified origin messages (the *Service).
type UnidentifiedSource interface {
	Unidentified(ctx context.Context, after string, limit int) (UnidentifiedPage, error)
}

// unidentifiedRequest is the body of the status service's "unidentified"
// endpoint and the query of GET /v1/unidentified.
type unidentifiedRequest struct {
	Limit int    `json:"limit"`
	After string `json:"after"`
}

func (m *microServer) unidentified(ctx context.Context, req micro.Request) {
	q := unidentifiedRequest{Limit: DefaultListLimit}
	if len(req.Data()) > maxMicroRequest {
		microError(req, http.StatusBadRequest, "request too large")
		return
	}
	if b := strings.TrimSpace(string(req.Data())); b != "" {
		if err := json.Unmarshal([]byte(b), &q); err != nil {
			microError(req, http.StatusBadRequest, "body: not a JSON object {\"limit\":N,\"after\":\"CURSOR\"}")
			return
		}
	}
	src, ok := m.src.(UnidentifiedSource)
	if !ok {
		microError(req, http.StatusNotFound, "this status service does not list unidentified origin messages")
		return
	}
	page, err := src.Unidentified(ctx, q.After, q.Limit)
	m.respond(req, page, err)
}

func (h *httpHandler) unidentified(w http.ResponseWriter, r *http.Request) {
	src, ok := h.src.(UnidentifiedSource)
	if !ok {
		writeError(w, http.StatusNotFound, "this status service does not list unidentified origin messages")
		return
	}
	limit := DefaultListLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "limit: not a number")
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), HTTPTimeout)
	defer cancel()
	page, err := src.Unidentified(ctx, r.URL.Query().Get("after"), limit)
	if err != nil {
		writeError(w, statusCode(err), errText(err))
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// Unidentified asks for a page of unidentified origin messages.
func (c *StatusClient) Unidentified(ctx context.Context, after string, limit int) (UnidentifiedPage, error) {
	body, _ := json.Marshal(unidentifiedRequest{Limit: limit, After: after})
	var out UnidentifiedPage
	err := c.call(ctx, "unidentified", body, &out)
	return out, err
}
