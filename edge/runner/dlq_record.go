package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/eventid"
	"github.com/leafline/leafline/sink"
)

// DLQVersion is the version of the DLQRecord format.
const DLQVersion = 1

// maxDLQRecordBytes bounds a decoded DLQ record (payload included).
const maxDLQRecordBytes = 80 << 20

// DLQRecord is what the edge publishes to its dead-letter subject for a
// message that failed permanently. It never carries the payload or headers
// unless dead_letter.include_payload / include_headers say so.
type DLQRecord struct {
	Version int `json:"v"`
	// Site is the edge that dead-lettered the message.
	Site string `json:"site"`
	// Subject, Stream and Consumer locate the original delivery.
	Subject  string `json:"subject"`
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	// StreamSeq and ConsumerSeq are the original message's sequences.
	StreamSeq   uint64 `json:"stream_seq"`
	ConsumerSeq uint64 `json:"consumer_seq"`
	// EventID is the event's id, or empty with EventIDError saying why.
	EventID      string `json:"event_id,omitempty"`
	EventIDError string `json:"event_id_error,omitempty"`
	// Delivered is the delivery count of the dead-lettered delivery.
	Delivered uint64 `json:"delivered"`
	// ErrorType is a stable, low-cardinality class ("no_event_id",
	// "oversize", "sink_permanent", "max_deliver", "worker_crash",
	// "bad_expiry_header").
	ErrorType string `json:"error_type"`
	// Error is the safe reason (only with include_error).
	Error string `json:"error,omitempty"`
	// DeadLetteredAt is when the record was built.
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	// Headers and Payload are copies of the original (only when configured).
	Headers map[string][]string `json:"headers,omitempty"`
	Payload []byte              `json:"payload,omitempty"`
}

// ErrBadDLQRecord means a DLQ record could not be decoded.
var ErrBadDLQRecord = errors.New("malformed DLQ record")

// Encode validates and encodes the record.
func (r DLQRecord) Encode() ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// DecodeDLQRecord decodes a record strictly: unknown fields, trailing data
// and missing required fields are errors wrapping ErrBadDLQRecord.
func DecodeDLQRecord(b []byte) (DLQRecord, error) {
	var r DLQRecord
	if len(b) > maxDLQRecordBytes {
		return r, fmt.Errorf("%w: %d bytes", ErrBadDLQRecord, len(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return DLQRecord{}, fmt.Errorf("%w: %v", ErrBadDLQRecord, err)
	}
	if dec.More() {
		return DLQRecord{}, fmt.Errorf("%w: trailing data", ErrBadDLQRecord)
	}
	if err := r.validate(); err != nil {
		return DLQRecord{}, err
	}
	return r, nil
}

func (r DLQRecord) validate() error {
	switch {
	case r.Version != DLQVersion:
		return fmt.Errorf("%w: version %d, want %d", ErrBadDLQRecord, r.Version, DLQVersion)
	case r.Site == "" || r.Stream == "" || r.Subject == "":
		return fmt.Errorf("%w: site, stream and subject are required", ErrBadDLQRecord)
	case r.StreamSeq == 0:
		return fmt.Errorf("%w: stream_seq is required", ErrBadDLQRecord)
	case r.EventID == "" && r.EventIDError == "":
		return fmt.Errorf("%w: event_id or event_id_error is required", ErrBadDLQRecord)
	case r.ErrorType == "":
		return fmt.Errorf("%w: error_type is required", ErrBadDLQRecord)
	case r.DeadLetteredAt.IsZero():
		return fmt.Errorf("%w: dead_lettered_at is required", ErrBadDLQRecord)
	}
	return nil
}

// dlqMsgID is the DLQ record's Nats-Msg-Id: one per original stream
// message, so a redelivery cannot add a second record within the DLQ
// stream's duplicate window.
func dlqMsgID(site, stream string, seq uint64) string {
	return fmt.Sprintf("dlq-%s-%s-%d", site, stream, seq)
}

// errorType classifies a permanent failure for DLQ records and metrics.
func errorType(err error) string {
	switch {
	case errors.Is(err, eventid.ErrNoEventID):
		return "no_event_id"
	case errors.Is(err, ErrOversize):
		return "oversize"
	case errors.Is(err, errMaxDeliver):
		return "max_deliver"
	case errors.Is(err, sink.ErrWorkerCrash):
		return "worker_crash"
	case errors.Is(err, receipt.ErrBadExpiry):
		return "bad_expiry_header"
	default:
		return "sink_permanent"
	}
}
