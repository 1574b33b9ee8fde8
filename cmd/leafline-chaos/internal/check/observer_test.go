package check

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
)

func entry(t *testing.T, rev uint64, id string, procs map[string]record.ProcessorRecord) logRecord {
	t.Helper()
	b, err := json.Marshal(record.Completion{EventID: id, OriginStream: "L1A", Processors: procs})
	if err != nil {
		t.Fatal(err)
	}
	return logRecord{key: "e." + base64.RawURLEncoding.EncodeToString([]byte(id)), val: b, rev: rev, op: jetstream.KeyValuePut}
}

func TestObserver(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pr := func(rid string, dups int) record.ProcessorRecord {
		return record.ProcessorRecord{Status: receipt.StatusProcessed, Site: "x", ReceiptID: rid, ReceivedAt: at, Duplicates: dups}
	}
	o := NewObserver([]string{"edge1", "edge2"})
	states := []byte{Acked, Acked, Acked, Unknown, Acked, Acked}
	for _, e := range []logRecord{
		// ev-0: complete, then a duplicate absorbed (same first record).
		entry(t, 1, "ev-0", map[string]record.ProcessorRecord{"edge1": pr("a", 0)}),
		entry(t, 2, "ev-0", map[string]record.ProcessorRecord{"edge1": pr("a", 0), "edge2": pr("b", 0)}),
		entry(t, 3, "ev-0", map[string]record.ProcessorRecord{"edge1": pr("a", 2), "edge2": pr("b", 0)}),
		// ev-1: only edge1 reported: lost.
		entry(t, 4, "ev-1", map[string]record.ProcessorRecord{"edge1": pr("c", 0)}),
		// ev-2: edge2's first record replaced by another receipt: applied twice.
		entry(t, 5, "ev-2", map[string]record.ProcessorRecord{"edge1": pr("d", 0), "edge2": pr("e", 0)}),
		entry(t, 6, "ev-2", map[string]record.ProcessorRecord{"edge1": pr("d", 0), "edge2": pr("f", 0)}),
		// ev-3: unknown outcome, never completed: fine.
		// ev-4: complete, then edge2 vanished from the record: regression (and lost).
		entry(t, 7, "ev-4", map[string]record.ProcessorRecord{"edge1": pr("g", 0), "edge2": pr("h", 0)}),
		entry(t, 8, "ev-4", map[string]record.ProcessorRecord{"edge1": pr("g", 0)}),
		// ev-5: complete, revisions seen out of order (final read after live watch).
		entry(t, 10, "ev-5", map[string]record.ProcessorRecord{"edge1": pr("i", 0), "edge2": pr("j", 0)}),
		entry(t, 9, "ev-5", map[string]record.ProcessorRecord{"edge1": pr("i", 0)}),
		// Phantoms: an id the driver never used, one beyond what it published.
		entry(t, 11, "someone-else", map[string]record.ProcessorRecord{"edge1": pr("k", 0)}),
		entry(t, 12, "ev-99", map[string]record.ProcessorRecord{"edge1": pr("l", 0)}),
		// A processor that is not an edge of the topology.
		entry(t, 13, "ev-0", map[string]record.ProcessorRecord{"edge1": pr("a", 2), "edge2": pr("b", 0), "edge9": pr("m", 0)}),
	} {
		o.Observe(e)
		o.Observe(e) // each revision may be seen twice (live and final)
	}
	v := o.Verdict(states)
	want := Verdict{Published: 6, Acked: 5, Unknown: 1, CompleteAcked: 3, Lost: 2, DupKV: 1, Phantoms: 3, Regressions: 1, DuplicatesAbsorbed: 2}
	got := Verdict{Published: v.Published, Acked: v.Acked, Unknown: v.Unknown, CompleteAcked: v.CompleteAcked, Lost: v.Lost,
		DupKV: v.DupKV, Phantoms: v.Phantoms, Regressions: v.Regressions, DuplicatesAbsorbed: v.DuplicatesAbsorbed}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("verdict\n got %+v\nwant %+v\nlost: %q\ndups: %q\nphantoms: %q\nregressions: %q",
			got, want, v.LostExamples, v.DupExamples, v.PhantomExamples, v.RegressionExamples)
	}
	if missing, complete := o.Remaining(states); missing != 2 || complete != 3 {
		t.Fatalf("remaining: missing %d complete %d", missing, complete)
	}
}

func TestEventNum(t *testing.T) {
	for _, tc := range []struct {
		id   string
		n    int
		isOK bool
	}{
		{"ev-0", 0, true}, {"ev-123", 123, true}, {"ev-", 0, false}, {"ev-01", 0, false},
		{"ev--1", 0, false}, {"ev-1x", 0, false}, {"ev-+1", 0, false}, {"x-1", 0, false},
	} {
		n, ok := EventNum(tc.id)
		if ok != tc.isOK || (ok && n != tc.n) || (ok && EventID(n) != tc.id) {
			t.Errorf("EventNum(%q) = %d, %t", tc.id, n, ok)
		}
	}
}

// An expired record is terminal; an expired record that another receipt of
// the same processor conflicted with is a violation.
func TestObserver_Expired(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pr := func(st receipt.Status, rid string, conflicts int) record.ProcessorRecord {
		return record.ProcessorRecord{Status: st, Site: "x", ReceiptID: rid, ReceivedAt: at, Conflicts: conflicts}
	}
	o := NewObserver([]string{"edge1"})
	states := []byte{Acked, Acked}
	for _, e := range []logRecord{
		entry(t, 1, "ev-0", map[string]record.ProcessorRecord{"edge1": pr(receipt.StatusExpired, "a", 0)}),
		entry(t, 2, "ev-1", map[string]record.ProcessorRecord{"edge1": pr(receipt.StatusExpired, "b", 0)}),
		entry(t, 3, "ev-1", map[string]record.ProcessorRecord{"edge1": pr(receipt.StatusExpired, "b", 1)}),
	} {
		o.Observe(e)
	}
	v := o.Verdict(states)
	if v.Lost != 0 || v.CompleteAcked != 2 {
		t.Errorf("lost %d complete %d, want 0 and 2: expired is terminal (%q)", v.Lost, v.CompleteAcked, v.LostExamples)
	}
	if v.ExpiredConflicts != 1 || len(v.ExpiredConflictExamples) != 1 || !strings.Contains(v.ExpiredConflictExamples[0], "ev-1") {
		t.Errorf("expired conflicts %d %q, want ev-1 alone", v.ExpiredConflicts, v.ExpiredConflictExamples)
	}
}
