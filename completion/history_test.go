package completion_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

// TestOpenStore_History creates the completion bucket with a history, then
// opens it again with other histories: each time the bucket is updated in
// place (same stream, same records), never recreated or purged.
func TestOpenStore_History(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	open := func(history int) *kvstore.Store {
		t.Helper()
		st, err := kvstore.OpenStore(ctx, kvstore.StoreConfig{JS: js, Create: true, History: history})
		if err != nil {
			t.Fatalf("OpenStore(History %d): %v", history, err)
		}
		return st
	}
	check := func(want int) {
		t.Helper()
		kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
		if err != nil {
			t.Fatal(err)
		}
		s, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.History() != int64(want) {
			t.Fatalf("bucket history %d, want %d", s.History(), want)
		}
		ix, err := js.KeyValue(ctx, kvstore.DefaultBucket+kvstore.IndexBucketSuffix)
		if err != nil {
			t.Fatal(err)
		}
		if s, err := ix.Status(ctx); err != nil || s.History() != 1 {
			t.Fatalf("index bucket history %v, %v; want 1", s, err)
		}
	}
	revisions := func() int {
		t.Helper()
		kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
		if err != nil {
			t.Fatal(err)
		}
		h, err := kv.History(ctx, kvstore.KVKey(receipttest.EventID(0)))
		if err != nil {
			t.Fatal(err)
		}
		return len(h)
	}
	r := receipttest.Receipt(receipttest.EventID(0))
	now := time.Now()

	st := open(5)
	check(5)
	for range 3 { // Applied, then two Duplicates: three revisions
		if _, err := st.ApplyOutcome(ctx, r, now); err != nil {
			t.Fatal(err)
		}
	}
	if n := revisions(); n != 3 {
		t.Fatalf("%d revisions, want 3", n)
	}

	open(16) // up: every revision kept
	check(16)
	if n := revisions(); n != 3 {
		t.Fatalf("after raising: %d revisions, want 3", n)
	}

	st = open(0) // zero means 1: down, the latest record kept
	check(1)
	if n := revisions(); n != 1 {
		t.Fatalf("after lowering: %d revisions, want 1", n)
	}
	c, err := st.Get(ctx, r.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Processors[r.Processor]; p.Status != receipt.StatusProcessed || p.Duplicates != 2 {
		t.Fatalf("record after lowering the history: %+v", p)
	}

	// Without Create, History is ignored: the bucket is only opened.
	if _, err := kvstore.OpenStore(ctx, kvstore.StoreConfig{JS: js, History: 7}); err != nil {
		t.Fatal(err)
	}
	check(1)
}

func TestOpenStore_History_Invalid(t *testing.T) {
	js := jstest.Unconnected(t)
	for _, h := range []int{-1, jetstream.KeyValueMaxHistory + 1} {
		_, err := kvstore.OpenStore(jstest.Ctx(t), kvstore.StoreConfig{JS: js, Create: true, History: h})
		if !errors.Is(err, record.ErrInvalidConfig) {
			t.Errorf("History %d: %v, want ErrInvalidConfig", h, err)
		}
		_, err = completion.NewService(completion.ServiceConfig{JS: js, Stream: "R1", History: h})
		if !errors.Is(err, record.ErrInvalidConfig) {
			t.Errorf("ServiceConfig.History %d: %v, want ErrInvalidConfig", h, err)
		}
	}
}

// TestService_Setup_History: Setup creates the bucket with History.
func TestService_Setup_History(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	completiontest.CreateR1(t, js)
	cfg := completiontest.Config(js)
	cfg.History = 16
	svc, err := completion.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := kv.Status(ctx); err != nil || s.History() != 16 {
		t.Fatalf("bucket history %v, %v; want 16", s, err)
	}
}
