package kvstore

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

func TestCompletion_IndexKeys(t *testing.T) {
	c := record.Completion{PublishedAt: time.Unix(1, 0), Expected: []string{"a", "b", "c"}, Processors: map[string]record.ProcessorRecord{
		"a": {Status: receipt.StatusDeadLettered}, "b": {Status: receipt.StatusProcessed, Conflicts: 1},
	}}
	c.Derive()
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
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	for _, drop := range []bool{false, true} {
		t.Run(map[bool]string{false: "landed", true: "dropped"}[drop], func(t *testing.T) {
			kv := &lossyKV{KeyValue: jstest.NewKV(t, js, map[bool]string{false: "lost_landed", true: "lost_dropped"}[drop]), drop: drop}
			st := NewStore(kv)
			r := receipttest.Receipt("evt-1")
			for i, want := range []record.Outcome{record.Applied, record.Duplicate, record.Duplicate} {
				kv.lose.Store(1)
				if got, err := st.ApplyOutcome(ctx, r, time.Now()); got != want || err != nil {
					t.Fatalf("apply %d: %v, %v; want %v", i, got, err, want)
				}
			}
			c, err := st.Get(ctx, "evt-1")
			if err != nil || c.Processors["edge-1"].Duplicates != 2 {
				t.Fatalf("record %+v %v", c, err)
			}
			o := record.Origin{EventID: "evt-1", Stream: "L1A", Subject: "events.x", Seq: 9, PublishedAt: time.Now(), Expected: []string{"edge-1"}}
			kv.lose.Store(1)
			if got, err := st.ApplyOrigin(ctx, o, time.Now()); got != record.OriginMerged || err != nil {
				t.Fatalf("ApplyOrigin: %v %v", got, err)
			}
			if c, _ := st.Get(ctx, "evt-1"); c.Status != record.EventComplete {
				t.Fatalf("after origin: %+v", c)
			}
		})
	}
	t.Run("never answered", func(t *testing.T) {
		kv := &lossyKV{KeyValue: jstest.NewKV(t, js, "lost_forever"), drop: true}
		kv.lose.Store(1 << 30)
		st := NewStore(kv)
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := st.ApplyOutcome(short, receipttest.Receipt("evt-1"), time.Now())
		if err == nil || errors.Is(err, receipt.ErrQuarantine) {
			t.Fatalf("ApplyOutcome = %v, want a transient error", err)
		}
	})
}
