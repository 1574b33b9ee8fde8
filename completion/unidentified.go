package completion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
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
	kv, err := kvstore.OpenBucket(ctx, s.cfg.JS, name, "leafline origin messages without a usable event_id", true, s.cfg.Replicas, 1)
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
	u := record.Unidentified{
		Stream: meta.Stream, Seq: meta.Sequence.Stream, Subject: msg.Subject(),
		PublishedAt: meta.Timestamp.UTC(), Size: len(msg.Data()),
		Reason: receipt.TruncateUTF8(cause.Error(), receipt.MaxReasonLen), RecordedAt: time.Now().UTC(),
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
func (s *Service) Unidentified(ctx context.Context, after string, limit int) (record.UnidentifiedPage, error) {
	if limit < 1 || limit > record.MaxListLimit {
		return record.UnidentifiedPage{}, fmt.Errorf("%w: limit must be 1..%d, got %d", receipt.ErrInvalid, record.MaxListLimit, limit)
	}
	var from uint64 = 1
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			return record.UnidentifiedPage{}, fmt.Errorf("%w: after: not a cursor from a previous page", receipt.ErrInvalid)
		}
		from = n + 1
	}
	page := record.UnidentifiedPage{Items: []record.Unidentified{}}
	kvp := s.unidentified.kv.Load()
	if kvp == nil {
		if s.State() == nil {
			return page, record.ErrNotReady
		}
		return page, nil
	}
	stream, err := s.cfg.JS.Stream(ctx, kvstore.StreamPrefix+(*kvp).Bucket())
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
		var u record.Unidentified
		if err := json.Unmarshal(m.Data, &u); err == nil {
			page.Items = append(page.Items, u)
		}
		seq = m.Sequence + 1
	}
	return page, nil
}
