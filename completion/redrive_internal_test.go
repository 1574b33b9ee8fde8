package completion

import (
	"testing"
	"time"

	"github.com/leafline/leafline/completion/record"
)

func TestRedrive_AtMostMaxRedrives(t *testing.T) {
	var r redriver
	now := time.Now()
	c := &record.Completion{EventID: "e", OriginSeq: 5, PublishedAt: now.Add(-time.Hour), Missing: []string{"p"}}
	if _, ok := r.due(c, time.Minute, now); ok {
		t.Fatal("due before its processor reported anything later")
	}
	r.sawReceipt("p", 4, now)
	if _, ok := r.due(c, time.Minute, now); ok {
		t.Fatal("due when its processor only reported an earlier event")
	}
	r.sawReceipt("p", 6, now)
	for i := 1; i <= maxRedrives; i++ {
		now = now.Add(time.Minute)
		r.sawReceipt("p", uint64(6+i), now)
		n, ok := r.due(c, time.Minute, now)
		if !ok || n != i {
			t.Fatalf("redrive %d: %d %v", i, n, ok)
		}
		r.done("e", now)
		if _, ok := r.due(c, time.Minute, now.Add(time.Second)); ok {
			t.Fatalf("due again %s after redrive %d", time.Second, i)
		}
	}
	now = now.Add(time.Minute)
	r.sawReceipt("p", 100, now)
	if _, ok := r.due(c, time.Minute, now); ok {
		t.Fatalf("due after %d redrives", maxRedrives)
	}
}

// A processor that reported a later event once, and since reports only
// earlier ones (copies of what its hub released), is alive: an event it
// misses is due. One that reports nothing is not.
func TestRedrive_AliveOnLowerReports(t *testing.T) {
	var r redriver
	now := time.Now()
	c := &record.Completion{EventID: "e", OriginSeq: 5, PublishedAt: now.Add(-time.Hour), Missing: []string{"p"}}
	r.sawReceipt("p", 9, now)
	now = now.Add(2 * time.Minute)
	if _, ok := r.due(c, time.Minute, now); ok {
		t.Fatal("due while its processor reported nothing for longer than the redrive period")
	}
	r.sawReceipt("p", 2, now)
	if _, ok := r.due(c, time.Minute, now); !ok {
		t.Fatal("not due though its processor reported a later event and is alive")
	}
}
