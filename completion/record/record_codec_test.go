package record

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/receipt"
)

// TestAppendCompletion_SameAsMarshal: the record encoder writes exactly
// what json.Marshal writes, for records with every field set or empty and
// strings with every character class JSON escapes.
func TestAppendCompletion_SameAsMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "evt-1", "a<b>&c", "quote\" back\\slash", "ctl\x00\x01\x1f\x7f", "tab\t nl\n cr\r bs\b ff\f",
		"😀 ü", "\u2028\u2029", "bad\xffutf8", strings.Repeat("x", 300)}
	str := func() string { return strs[rng.IntN(len(strs))] }
	tm := func() time.Time {
		if rng.IntN(4) == 0 {
			return time.Time{}
		}
		return time.Date(2026, 1, 2, 3, 4, 5, rng.IntN(1e9), time.UTC).Add(time.Duration(rng.IntN(1e6)) * time.Second)
	}
	procs := func() map[string]ProcessorRecord {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return map[string]ProcessorRecord{}
		}
		m := map[string]ProcessorRecord{}
		for range 1 + rng.IntN(4) {
			m[str()] = ProcessorRecord{Status: receipt.Status(str()), Site: str(), ReceiptID: str(), ProcessedAt: tm(), ReceivedAt: tm(),
				Duplicates: rng.IntN(3), Conflicts: rng.IntN(2), Reason: str(), Verified: rng.IntN(2) == 0}
		}
		return m
	}
	for i := range 2000 {
		c := Completion{EventID: str(), OriginStream: str(), Subject: str(), OriginSeq: uint64(rng.IntN(3)), PublishedAt: tm(),
			Processors: procs(), Held: procs(), Unexpected: procs(), PayloadSHA256: str(), Status: EventStatus(str()),
			Conflict: rng.IntN(2) == 0, UpdatedAt: tm(), Overdue: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			c.Expected = []string{str(), str()}
			c.Missing = []string{str()}
		}
		if rng.IntN(3) == 0 {
			c.Reused = []OriginReuse{{Seq: 7, Subject: str(), PublishedAt: tm(), PayloadSHA256: str()}}
		}
		if rng.IntN(3) == 0 {
			c.Cleaned = &AuditRef{Stream: str(), Seq: 3, Subject: str(), DeletedBy: str(), DecidedAt: tm()}
		}
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendCompletion(nil, &c); string(got) != string(want) {
			t.Fatalf("record %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
