package record

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/receipt"
)

func TestCompletion_Derive(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	proc := func(st receipt.Status, conflicts int) ProcessorRecord {
		return ProcessorRecord{Status: st, Conflicts: conflicts}
	}
	for _, tt := range []struct {
		name     string
		c        Completion
		status   EventStatus
		conflict bool
		missing  []string
		overdue  bool
	}{
		{"origin unknown, nothing reported", Completion{}, EventPending, false, nil, false},
		{"origin unknown, processed", Completion{Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusProcessed, 0)}}, EventPending, false, nil, false},
		{"origin unknown, dead", Completion{Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusDeadLettered, 0)}}, EventDeadLettered, false, nil, false},
		{"none expected", Completion{PublishedAt: t0}, EventComplete, false, nil, false},
		{"one of two", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusProcessed, 0)}}, EventPending, false, []string{"b"}, true},
		{"both", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusProcessed, 0), "b": proc(receipt.StatusProcessed, 2)}}, EventComplete, true, nil, false},
		{"dead beats missing", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusDeadLettered, 0)}}, EventDeadLettered, false, []string{"b"}, false},
		{"unexpected processor dead", Completion{PublishedAt: t0, Expected: []string{"a"}, Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusProcessed, 0), "z": proc(receipt.StatusDeadLettered, 0)}}, EventDeadLettered, false, nil, false},
		{"expired", Completion{PublishedAt: t0, Expected: []string{"a"}, Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusExpired, 0)}}, EventExpired, false, nil, false},
		{"expired beats missing", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusExpired, 0)}}, EventExpired, false, []string{"b"}, false},
		{"dead beats expired", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusExpired, 0), "b": proc(receipt.StatusDeadLettered, 0)}}, EventDeadLettered, false, nil, false},
		{"recent", Completion{PublishedAt: t0.Add(time.Hour), Expected: []string{"a"}}, EventPending, false, []string{"a"}, false},
		{"retired and processed", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusProcessed, 0), "b": proc(StatusRetired, 0)}}, EventRetired, false, nil, false},
		{"retired, one missing", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"b": proc(StatusRetired, 0)}}, EventPending, false, []string{"a"}, true},
		{"expired beats retired", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(receipt.StatusExpired, 0), "b": proc(StatusRetired, 0)}}, EventExpired, false, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			if c.Processors == nil {
				c.Processors = map[string]ProcessorRecord{}
			}
			c.View(t0.Add(time.Hour-time.Nanosecond), time.Minute)
			if c.Status != tt.status || c.Conflict != tt.conflict || !slices.Equal(c.Missing, tt.missing) || c.Overdue != tt.overdue {
				t.Errorf("got status %s conflict %v missing %q overdue %v", c.Status, c.Conflict, c.Missing, c.Overdue)
			}
		})
	}
}

func TestOrigin_Validate(t *testing.T) {
	good := Origin{EventID: "e", Stream: "L1A", PublishedAt: time.Now(), Expected: []string{"edge-1"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Origin{Expected: []string{"a.b", ""}}
	err := bad.Validate()
	if !errors.Is(err, receipt.ErrInvalid) {
		t.Fatalf("Validate = %v", err)
	}
	for _, want := range []string{"event_id", "stream", "published_at", `"a.b"`, `""`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

// A retirement closes only what the site has not reported, and a receipt
// the site sent before it was retired replaces it without a conflict; a
// retirement after its receipt changes nothing.
func TestCompletion_FoldRetirement(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewCompletion("ev")
	c.FoldOrigin(Origin{EventID: "ev", Stream: "L1A", Seq: 1, PublishedAt: t0, Expected: []string{"a", "b"}}, t0)
	if !c.FoldRetirement(Retirement{EventID: "ev", Site: "b", At: t0, Reason: "retired"}) {
		t.Fatal("a missing processor was not retired")
	}
	if c.FoldRetirement(Retirement{EventID: "ev", Site: "b", At: t0}) || c.FoldRetirement(Retirement{EventID: "ev", Site: "z", At: t0}) {
		t.Fatal("a retirement changed a processor that is not missing")
	}
	c.Derive()
	if c.Status != EventPending || c.Processors["b"].Status != StatusRetired || c.Processors["b"].Reason != "retired" {
		t.Fatalf("after the retirement: %s %+v", c.Status, c.Processors["b"])
	}
	late := receipt.New("ev", "L1A", "b", "b", receipt.StatusProcessed, t0)
	if out, err := c.FoldReceipt(late, t0.Add(time.Minute), true); err != nil || out != Applied {
		t.Fatalf("a receipt sent before the retirement: %v %v", out, err)
	}
	a := receipt.New("ev", "L1A", "a", "a", receipt.StatusProcessed, t0)
	if _, err := c.FoldReceipt(a, t0, true); err != nil {
		t.Fatal(err)
	}
	c.Derive()
	if c.Status != EventComplete || c.Conflict || c.Processors["b"].Status != receipt.StatusProcessed {
		t.Fatalf("the late receipt did not replace the retirement: %s conflict %v %+v", c.Status, c.Conflict, c.Processors["b"])
	}
	if c.FoldRetirement(Retirement{EventID: "ev", Site: "b", At: t0}) {
		t.Fatal("a retirement after the site's receipt changed the record")
	}
}
