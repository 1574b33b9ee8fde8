package receipt

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

func TestNew(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))
	r := New("evt-1", "L1A", "edge-1", "site-1", StatusProcessed, now)
	if err := r.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if u := uuid.MustParse(r.ReceiptID); u.Version() != 7 {
		t.Errorf("receipt_id version %d, want 7", u.Version())
	}
	if !r.ProcessedAt.Equal(now) || r.ProcessedAt.Location() != time.UTC {
		t.Errorf("ProcessedAt = %v", r.ProcessedAt)
	}
	if r2 := New("evt-1", "L1A", "edge-1", "site-1", StatusProcessed, now); r2.ReceiptID == r.ReceiptID {
		t.Error("two receipts share a receipt_id")
	}
	if z := New("e", "o", "p", "s", StatusProcessed, time.Time{}); z.ProcessedAt.IsZero() {
		t.Error("zero now not replaced")
	}
}

func TestStatus_Valid(t *testing.T) {
	for s, want := range map[Status]bool{StatusProcessed: true, StatusDeadLettered: true, "": false, "Processed": false} {
		if s.Valid() != want {
			t.Errorf("%q.Valid() = %v", s, !want)
		}
	}
}

var msgIDRe = regexp.MustCompile(`^rcpt-[-0-9A-Za-z_]{0,32}\.[-0-9A-Za-z_]{43}$`)

func TestMsgID(t *testing.T) {
	a := New("evt-1", "L1A", "edge-1", "site-1", StatusProcessed, time.Now())
	b := New("evt-1", "OTHER", "edge-1", "site-2", StatusProcessed, time.Now().Add(time.Hour))
	b.Reason = "different"
	if !msgIDRe.MatchString(a.MsgID()) {
		t.Fatalf("MsgID %q has the wrong form", a.MsgID())
	}
	if a.ReceiptID == b.ReceiptID || a.MsgID() != b.MsgID() {
		t.Fatal("MsgID depends on receipt_id, processed_at, site, origin or reason")
	}
	// Stable across processes and restarts: a golden value ("evt-1", then
	// sha256 of "evt-1\x00edge-1\x00processed" = 1c3cf0ff…, in ordered64).
	const goldenMsgID = "rcpt-OMOoAI3.62nkzwB9wyOUB5tFfqls6n7cZOJ8sEj_vB7-P2TS267"
	if got := (Receipt{EventID: "evt-1", Processor: "edge-1", Status: StatusProcessed}).MsgID(); got != goldenMsgID {
		t.Errorf("MsgID changed: %s, want %s", got, goldenMsgID)
	}
	for name, c := range map[string]Receipt{
		"event":     {EventID: "evt-2", Processor: "edge-1", Status: StatusProcessed},
		"processor": {EventID: "evt-1", Processor: "edge-2", Status: StatusProcessed},
		"status":    {EventID: "evt-1", Processor: "edge-1", Status: StatusDeadLettered},
		"boundary":  {EventID: "evt-1e", Processor: "dge-1", Status: StatusProcessed},
	} {
		if c.MsgID() == a.MsgID() {
			t.Errorf("changing %s does not change MsgID", name)
		}
	}
}

// MsgIDs sort as the event ids they start with do, so that the edge's
// outbox appends the receipts of time-ordered ids.
func TestMsgID_KeepsEventOrder(t *testing.T) {
	var ids, msgIDs []string
	for i := range 5000 {
		// Sorted ids of mixed shapes: a UUIDv7-like time prefix, and ids
		// longer than the prefix that MsgID keeps.
		id := fmt.Sprintf("%012x-7%03x-%s", int64(0x0193a5f27c1e)+int64(i/7), i%7*311, strings.Repeat("z", i%40))
		ids = append(ids, id)
		msgIDs = append(msgIDs, Receipt{EventID: id, Processor: "edge-1", Status: StatusProcessed}.MsgID())
	}
	if !slices.IsSorted(ids) {
		t.Fatal("the test's ids are not sorted")
	}
	for i := 1; i < len(msgIDs); i++ {
		if msgIDs[i-1] > msgIDs[i] && prefix(ids[i-1]) != prefix(ids[i]) {
			t.Fatalf("%q < %q but their MsgIDs %q > %q", ids[i-1], ids[i], msgIDs[i-1], msgIDs[i])
		}
	}
	// Past the prefix only the hash tells ids apart, and it does.
	long := strings.Repeat("a", 100)
	a := Receipt{EventID: long + "1", Processor: "edge-1", Status: StatusProcessed}.MsgID()
	b := Receipt{EventID: long + "2", Processor: "edge-1", Status: StatusProcessed}.MsgID()
	if a == b || a[:strings.IndexByte(a, '.')] != b[:strings.IndexByte(b, '.')] || !msgIDRe.MatchString(a) {
		t.Fatalf("long ids: %q, %q", a, b)
	}
}

func prefix(id string) string { return id[:min(len(id), msgIDPrefixLen)] }

func TestValidate_ErrorsMatch(t *testing.T) {
	err := Receipt{}.Validate()
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrQuarantine) {
		t.Fatalf("unexpected error classes for %v", err)
	}
	if errors.Is(jetstream.ErrKeyNotFound, ErrQuarantine) {
		t.Fatal("transient errors must not match ErrQuarantine")
	}
}
