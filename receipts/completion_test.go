package receipts

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestCompletion_Derive(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	proc := func(st Status, conflicts int) ProcessorRecord {
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
		{"origin unknown, processed", Completion{Processors: map[string]ProcessorRecord{"a": proc(StatusProcessed, 0)}}, EventPending, false, nil, false},
		{"origin unknown, dead", Completion{Processors: map[string]ProcessorRecord{"a": proc(StatusDeadLettered, 0)}}, EventDeadLettered, false, nil, false},
		{"none expected", Completion{PublishedAt: t0}, EventComplete, false, nil, false},
		{"one of two", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(StatusProcessed, 0)}}, EventPending, false, []string{"b"}, true},
		{"both", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(StatusProcessed, 0), "b": proc(StatusProcessed, 2)}}, EventComplete, true, nil, false},
		{"dead beats missing", Completion{PublishedAt: t0, Expected: []string{"a", "b"}, Processors: map[string]ProcessorRecord{"a": proc(StatusDeadLettered, 0)}}, EventDeadLettered, false, []string{"b"}, false},
		{"unexpected processor dead", Completion{PublishedAt: t0, Expected: []string{"a"}, Processors: map[string]ProcessorRecord{"a": proc(StatusProcessed, 0), "z": proc(StatusDeadLettered, 0)}}, EventDeadLettered, false, nil, false},
		{"recent", Completion{PublishedAt: t0.Add(time.Hour), Expected: []string{"a"}}, EventPending, false, []string{"a"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			if c.Processors == nil {
				c.Processors = map[string]ProcessorRecord{}
			}
			c.view(t0.Add(time.Hour-time.Nanosecond), time.Minute)
			if c.Status != tt.status || c.Conflict != tt.conflict || !slices.Equal(c.Missing, tt.missing) || c.Overdue != tt.overdue {
				t.Errorf("got status %s conflict %v missing %q overdue %v", c.Status, c.Conflict, c.Missing, c.Overdue)
			}
		})
	}
}

func TestCompletion_IndexKeys(t *testing.T) {
	c := Completion{PublishedAt: time.Unix(1, 0), Expected: []string{"a", "b", "c"}, Processors: map[string]ProcessorRecord{
		"a": {Status: StatusDeadLettered}, "b": {Status: StatusProcessed, Conflicts: 1},
	}}
	c.derive()
	var got []string
	for _, k := range indexKeys(&c) {
		got = append(got, k.key("T"))
	}
	want := []string{"c.=.T", "c.b.T", "d.=.T", "d.a.T", "p.c.T"}
	if !slices.Equal(got, want) {
		t.Errorf("index keys %q, want %q", got, want)
	}
	for _, tt := range []struct {
		k    idxKey
		want bool
	}{
		{eventKey(kindPending), true},      // dead: never pending again
		{siteKey(kindPending, "a"), true},  // reported
		{siteKey(kindPending, "c"), false}, // still owed
		{siteKey(kindPending, "z"), true},  // not expected
		{siteKey(kindDead, "b"), true},     // b processed: never dead
		{siteKey(kindDead, "c"), false},    // c may still dead-letter
		{eventKey(kindDead), false},        // monotonic flags are never removed
		{eventKey(kindConflict), false},
		{siteKey(kindConflict, "a"), false},
	} {
		if got := permanentlyFalse(&c, tt.k); got != tt.want {
			t.Errorf("permanentlyFalse(%s) = %v", tt.k, got)
		}
	}
}

// lossyKV performs writes but reports a lost answer for the first lose of
// them; with drop set it loses them without performing them.
type lossyKV struct {
	jetstream.KeyValue
	lose atomic.Int32
	drop bool
}

func (k *lossyKV) lost() bool { return k.lose.Add(-1) >= 0 }

func (k *lossyKV) Create(ctx context.Context, key string, val []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if k.drop && k.lost() {
		return 0, nats.ErrTimeout
	}
	rev, err := k.KeyValue.Create(ctx, key, val, opts...)
	if err == nil && !k.drop && k.lost() {
		return 0, nats.ErrTimeout
	}
	return rev, err
}

func (k *lossyKV) Update(ctx context.Context, key string, val []byte, last uint64) (uint64, error) {
	if k.drop && k.lost() {
		return 0, nats.ErrTimeout
	}
	rev, err := k.KeyValue.Update(ctx, key, val, last)
	if err == nil && !k.drop && k.lost() {
		return 0, nats.ErrTimeout
	}
	return rev, err
}

// TestStore_Apply_LostAnswer: a write that landed but whose answer was lost
// is recognized, so Applied is reported exactly once and nothing is counted
// twice; a write that did not land is retried.
func TestStore_Apply_LostAnswer(t *testing.T) {
	_, js := startJS(t)
	ctx := testCtx(t)
	for _, drop := range []bool{false, true} {
		t.Run(map[bool]string{false: "landed", true: "dropped"}[drop], func(t *testing.T) {
			kv := &lossyKV{KeyValue: newKV(t, js, map[bool]string{false: "lost_landed", true: "lost_dropped"}[drop]), drop: drop}
			st := NewStore(kv)
			r := testReceipt("evt-1")
			for i, want := range []Outcome{Applied, Duplicate, Duplicate} {
				kv.lose.Store(1)
				if got, err := st.ApplyOutcome(ctx, r, time.Now()); got != want || err != nil {
					t.Fatalf("apply %d: %v, %v; want %v", i, got, err, want)
				}
			}
			c, err := st.Get(ctx, "evt-1")
			if err != nil || c.Processors["edge-1"].Duplicates != 2 {
				t.Fatalf("record %+v %v", c, err)
			}
			o := Origin{EventID: "evt-1", Stream: "L1A", Subject: "events.x", Seq: 9, PublishedAt: time.Now(), Expected: []string{"edge-1"}}
			kv.lose.Store(1)
			if got, err := st.ApplyOrigin(ctx, o, time.Now()); got != OriginMerged || err != nil {
				t.Fatalf("ApplyOrigin: %v %v", got, err)
			}
			if c, _ := st.Get(ctx, "evt-1"); c.Status != EventComplete {
				t.Fatalf("after origin: %+v", c)
			}
		})
	}
	t.Run("never answered", func(t *testing.T) {
		kv := &lossyKV{KeyValue: newKV(t, js, "lost_forever"), drop: true}
		kv.lose.Store(1 << 30)
		st := NewStore(kv)
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := st.ApplyOutcome(short, testReceipt("evt-1"), time.Now())
		if err == nil || errors.Is(err, ErrQuarantine) {
			t.Fatalf("ApplyOutcome = %v, want a transient error", err)
		}
	})
}

func TestOrigin_Validate(t *testing.T) {
	good := Origin{EventID: "e", Stream: "L1A", PublishedAt: time.Now(), Expected: []string{"edge-1"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Origin{Expected: []string{"a.b", ""}}
	err := bad.Validate()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate = %v", err)
	}
	for _, want := range []string{"event_id", "stream", "published_at", `"a.b"`, `""`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}
