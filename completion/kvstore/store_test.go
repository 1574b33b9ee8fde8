package kvstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

func TestStore_Apply(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	st := NewStore(jstest.NewKV(t, js, "store_apply"))
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	if _, err := st.Get(ctx, "evt-1"); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("Get before Apply: %v, want ErrNotFound", err)
	}

	first := receipttest.Receipt("evt-1")
	steps := []struct {
		name string
		r    receipt.Receipt
		want record.Outcome
	}{
		{"first", first, record.Applied},
		{"same receipt again", first, record.Duplicate},
		{"new receipt, same status", receipttest.Receipt("evt-1"), record.Duplicate},
		{"different status", func() receipt.Receipt {
			r := receipttest.Receipt("evt-1")
			r.Status, r.Reason = receipt.StatusDeadLettered, "late failure"
			return r
		}(), record.Conflict},
		{"other processor", func() receipt.Receipt {
			r := receipttest.Receipt("evt-1")
			r.Processor, r.Site = "edge-2", "edge-2"
			return r
		}(), record.Applied},
	}
	for i, s := range steps {
		got, err := st.ApplyOutcome(ctx, s.r, t0.Add(time.Duration(i)*time.Second))
		if err != nil || got != s.want {
			t.Fatalf("%s: ApplyOutcome = %v, %v; want %v", s.name, got, err, s.want)
		}
	}

	c, err := st.Get(ctx, "evt-1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := record.ProcessorRecord{
		Status: receipt.StatusProcessed, Site: "edge-1", ReceiptID: first.ReceiptID,
		ProcessedAt: first.ProcessedAt, ReceivedAt: t0, Duplicates: 2, Conflicts: 1,
	}
	if got := c.Processors["edge-1"]; got != want {
		t.Errorf("edge-1 record\n got %+v\nwant %+v", got, want)
	}
	if c.EventID != "evt-1" || c.OriginStream != "L1A" || len(c.Processors) != 2 || !c.UpdatedAt.Equal(t0.Add(4*time.Second)) {
		t.Errorf("completion %+v", c)
	}

	applied, err := st.Apply(ctx, first, t0)
	if applied || err != nil {
		t.Errorf("Apply of a duplicate = %v, %v", applied, err)
	}
}

func TestStore_Apply_InvalidReceipt(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	st := NewStore(jstest.NewKV(t, js, "store_invalid"))
	r := receipttest.Receipt("evt-1")
	r.Processor = "a.b"
	if _, err := st.Apply(jstest.Ctx(t), r, time.Now()); !errors.Is(err, receipt.ErrInvalid) {
		t.Fatalf("Apply = %v, want ErrInvalid", err)
	}
}

func TestStore_Apply_CorruptRecord(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	kv := jstest.NewKV(t, js, "store_corrupt")
	st := NewStore(kv)
	for id, val := range map[string]string{
		"evt-junk":    "not json",
		"evt-other":   `{"event_id":"someone-else","processors":{}}`,
		"evt-no-proc": `{"event_id":"evt-no-proc"}`,
	} {
		if _, err := kv.Put(ctx, KVKey(id), []byte(val)); err != nil {
			t.Fatal(err)
		}
		_, err := st.Apply(ctx, receipttest.Receipt(id), time.Now())
		if !errors.Is(err, record.ErrCorruptRecord) || !errors.Is(err, receipt.ErrQuarantine) {
			t.Errorf("%s: Apply = %v, want ErrCorruptRecord", id, err)
		}
		e, _ := kv.Get(ctx, KVKey(id))
		if string(e.Value()) != val {
			t.Errorf("%s: corrupt record overwritten", id)
		}
	}
}

func TestStore_Apply_ContextDone(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	st := NewStore(jstest.NewKV(t, js, "store_ctx"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := st.Apply(ctx, receipttest.Receipt("evt-1"), time.Now())
	if err == nil || errors.Is(err, receipt.ErrQuarantine) {
		t.Fatalf("Apply with a done context = %v, want a transient error", err)
	}
}

// TestStore_Apply_Concurrent races goroutines on one Store and on separate
// connections (as separate instances would) with the same receipt: exactly
// one applies and every other call is counted as a duplicate.
func TestStore_Apply_Concurrent(t *testing.T) {
	srv, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	jstest.NewKV(t, js, "store_race")

	const workers = 8
	stores := make([]*Store, workers)
	for i := range stores {
		kv, err := jstest.Connect(t, srv).KeyValue(ctx, "store_race")
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = NewStore(kv)
	}
	for round := 0; round < 20; round++ {
		r := receipttest.Receipt(receipttest.EventID(round))
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			applied int
			errs    []error
		)
		start := make(chan struct{})
		for i := 0; i < workers; i++ {
			wg.Add(1)
			go func(st *Store) {
				defer wg.Done()
				<-start
				ok, err := st.Apply(ctx, r, time.Now())
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				if ok {
					applied++
				}
			}(stores[i%len(stores)])
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 || applied != 1 {
			t.Fatalf("round %d: applied %d times, errors %v", round, applied, errs)
		}
		c, err := stores[0].Get(ctx, r.EventID)
		if err != nil {
			t.Fatal(err)
		}
		if d := c.Processors["edge-1"].Duplicates; d != workers-1 {
			t.Fatalf("round %d: Duplicates = %d, want %d", round, d, workers-1)
		}
	}
}
