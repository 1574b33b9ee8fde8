package completion

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/receipt"
)

// MaxQuarantinedBytes bounds the raw receipt copied into a quarantine
// record, so a huge bad message still yields a publishable record. The full
// original stays in the receipts stream at QuarantineRecord.StreamSeq.
const MaxQuarantinedBytes = 64 << 10

// QuarantineRecord is the JSON body published to the quarantine stream for a
// receipt that cannot be applied.
type QuarantineRecord struct {
	Reason    string `json:"reason"`     // why; never contains the payload
	Subject   string `json:"subject"`    // original subject in the receipts stream
	Stream    string `json:"stream"`     // receipts stream name
	StreamSeq uint64 `json:"stream_seq"` // sequence in that stream
	// Index and Of place a receipt quarantined alone in its bundle: it is
	// receipt Index (from 0) of Of. Both are zero for a whole message.
	Index      int       `json:"index,omitempty"`
	Of         int       `json:"of,omitempty"`
	Receipt    []byte    `json:"receipt"` // raw bytes (base64 in JSON), at most MaxQuarantinedBytes
	Size       int       `json:"size"`    // length of the original receipt (or message body)
	Truncated  bool      `json:"truncated,omitempty"`
	ReceivedAt time.Time `json:"received_at"`
}

// quarantined is what a quarantine record holds of a message: the whole
// message (of 1), or receipt index of a bundle of of.
type quarantined struct {
	raw       []byte
	index, of int
}

// quarantineMsgID derives the Nats-Msg-Id of a quarantine record from the
// receipts stream name and sequence (and the receipt's place in a bundle),
// so a redelivered bad message is deduplicated in the quarantine stream's
// window.
func quarantineMsgID(meta *jetstream.MsgMetadata, data []byte, q quarantined) string {
	id := ""
	if meta == nil { // not a JetStream delivery; cannot happen from a consumer
		sum := sha256.Sum256(data)
		id = "rq-sha256-" + hex.EncodeToString(sum[:])
	} else {
		id = "rq-" + meta.Stream + "-" + strconv.FormatUint(meta.Sequence.Stream, 10)
	}
	if q.of > 1 {
		id += "-" + strconv.Itoa(q.index)
	}
	return id
}

// publishQuarantine writes the record of q, from msg, and waits for its
// PubAck. It reports whether the stream stored a new message (false: a
// duplicate of an earlier attempt).
func (s *Service) publishQuarantine(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, q quarantined, receivedAt time.Time, cause error) (bool, error) {
	data := q.raw
	rec := QuarantineRecord{
		Reason:     receipt.TruncateUTF8(cause.Error(), receipt.MaxReasonLen),
		Subject:    msg.Subject(),
		Stream:     s.cfg.Stream,
		Receipt:    data,
		Size:       len(data),
		ReceivedAt: receivedAt,
	}
	if q.of > 1 {
		rec.Index, rec.Of = q.index, q.of
	}
	if meta != nil {
		rec.Stream, rec.StreamSeq = meta.Stream, meta.Sequence.Stream
	}
	if len(data) > MaxQuarantinedBytes {
		rec.Receipt, rec.Truncated = data[:MaxQuarantinedBytes], true
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return false, fmt.Errorf("receipts: quarantine record: %w", err)
	}
	out := &nats.Msg{Subject: s.quarantineSubject, Data: body, Header: nats.Header{}}
	pa, err := s.cfg.JS.PublishMsg(ctx, out,
		jetstream.WithMsgID(quarantineMsgID(meta, msg.Data(), q)),
		jetstream.WithExpectStream(s.cfg.QuarantineStream))
	if err != nil {
		return false, fmt.Errorf("receipts: quarantine publish: %w", err)
	}
	return !pa.Duplicate, nil
}
