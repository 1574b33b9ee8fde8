package outbox

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"
)

// State is the publish state of a Record.
type State uint8

const (
	// StatePending: committed, not yet PubAck'ed by the receipts stream.
	StatePending State = 1
	// StatePublished: PubAck'ed by the receipts stream (MarkPublished ran).
	StatePublished State = 2
)

// String returns "pending", "published" or "State(n)".
func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StatePublished:
		return "published"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Limits checked by Commit; a record beyond them is rejected with
// ErrInvalidRecord before anything is stored.
const (
	MaxKeyLen  = 512      // bytes of Record.Key
	MaxDataLen = 16 << 20 // bytes of Record.Data
)

// Record is one receipt waiting for, or past, its publish.
//
// The caller of Commit sets Key, Subject and Data; Commit assigns Seq, State
// and CreatedAt (values the caller put there are ignored). Times returned by
// the outbox are in UTC with nanosecond precision and no monotonic reading,
// so a record returned by Commit compares equal to the same record read
// back later.
type Record struct {
	Key         string    // idempotency key; used as Nats-Msg-Id; non-empty, <= MaxKeyLen bytes
	Subject     string    // where it is published; non-empty
	Data        []byte    // encoded receipt (opaque to the outbox); nil when empty
	Seq         uint64    // assigned by Commit, increasing
	State       State     // StatePending or StatePublished
	CreatedAt   time.Time // set by Commit
	PublishedAt time.Time // set by MarkPublished; zero while pending
}

func (r *Record) validate() error {
	switch {
	case r.Key == "":
		return fmt.Errorf("%w: empty Key", ErrInvalidRecord)
	case len(r.Key) > MaxKeyLen:
		return fmt.Errorf("%w: Key is %d bytes, more than %d", ErrInvalidRecord, len(r.Key), MaxKeyLen)
	case r.Subject == "":
		return fmt.Errorf("%w: key %q: empty Subject", ErrInvalidRecord, r.Key)
	case len(r.Data) > MaxDataLen:
		return fmt.Errorf("%w: key %q: Data is %d bytes, more than %d", ErrInvalidRecord, r.Key, len(r.Data), MaxDataLen)
	}
	return nil
}

// Record encoding, format 1 (the value stored under the Key in the records
// bucket):
//
//	byte     format (1)
//	byte     state
//	uvarint  seq
//	varint   created at, Unix nanoseconds (0 = zero time)
//	varint   published at, Unix nanoseconds (0 = zero time)
//	uvarint  len(subject), subject bytes
//	uvarint  len(data), data bytes
//	4 bytes  CRC-32C (Castagnoli), big endian, of the key followed by all
//	         the bytes above
//
// Schema 2 writes every record with state pending and no published time,
// and never rewrites it: its published state is its mark (see load). Only
// records written by schema 1 may say "published" here.
//
// bbolt has no checksums on data pages; the CRC lets Get, Pending and Check
// detect a damaged record, or a record found under the wrong key, instead of
// publishing garbage.
const recordFormat1 = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func timeToNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func nanosToTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// normalTime strips the monotonic reading and location so that a time
// compares equal to its decoded copy.
func normalTime(t time.Time) time.Time { return nanosToTime(timeToNanos(t)) }

func encodeRecord(r *Record) []byte {
	n := 2 + 3*binary.MaxVarintLen64 + 2*binary.MaxVarintLen32 + len(r.Subject) + len(r.Data) + 4
	b := make([]byte, 0, n)
	b = append(b, recordFormat1, byte(r.State))
	b = binary.AppendUvarint(b, r.Seq)
	b = binary.AppendVarint(b, timeToNanos(r.CreatedAt))
	b = binary.AppendVarint(b, timeToNanos(r.PublishedAt))
	b = binary.AppendUvarint(b, uint64(len(r.Subject)))
	b = append(b, r.Subject...)
	b = binary.AppendUvarint(b, uint64(len(r.Data)))
	b = append(b, r.Data...)
	sum := crc32.Update(crc32.Update(0, castagnoli, []byte(r.Key)), castagnoli, b)
	return binary.BigEndian.AppendUint32(b, sum)
}

// decodeRecord decodes v, stored under key. The returned record's Data
// aliases v: callers holding it past the transaction must use clone.
func decodeRecord(key, v []byte) (Record, error) {
	bad := func(what string) (Record, error) {
		return Record{}, fmt.Errorf("%w: record %q: %s", ErrCorrupt, key, what)
	}
	if len(v) < 2+4 {
		return bad("value too short")
	}
	body, tail := v[:len(v)-4], v[len(v)-4:]
	sum := crc32.Update(crc32.Update(0, castagnoli, key), castagnoli, body)
	if sum != binary.BigEndian.Uint32(tail) {
		return bad("checksum mismatch")
	}
	if body[0] != recordFormat1 {
		return bad(fmt.Sprintf("unknown record format %d", body[0]))
	}
	r := Record{Key: string(key), State: State(body[1])}
	if r.State != StatePending && r.State != StatePublished {
		return bad(fmt.Sprintf("invalid state %d", body[1]))
	}
	p := body[2:]
	var k int
	if r.Seq, k = binary.Uvarint(p); k <= 0 {
		return bad("bad seq")
	}
	p = p[k:]
	created, k := binary.Varint(p)
	if k <= 0 {
		return bad("bad created time")
	}
	p = p[k:]
	published, k := binary.Varint(p)
	if k <= 0 {
		return bad("bad published time")
	}
	p = p[k:]
	r.CreatedAt, r.PublishedAt = nanosToTime(created), nanosToTime(published)
	ln, k := binary.Uvarint(p)
	if k <= 0 || ln > uint64(len(p)-k) {
		return bad("bad subject length")
	}
	r.Subject = string(p[k : k+int(ln)])
	p = p[k+int(ln):]
	ln, k = binary.Uvarint(p)
	if k <= 0 || ln != uint64(len(p)-k) {
		return bad("bad data length")
	}
	if ln > 0 {
		r.Data = p[k:]
	}
	return r, nil
}

// clone returns r with its own copy of Data (bbolt memory is valid only
// inside the transaction).
func (r Record) clone() Record {
	if r.Data != nil {
		r.Data = append([]byte(nil), r.Data...)
	}
	return r
}
