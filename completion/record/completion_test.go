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
