package kvstore

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

// openTestStore opens an indexed, holding Store on bucket.
func openTestStore(t *testing.T, js jetstream.JetStream, bucket string) *Store {
	t.Helper()
	st, err := OpenStore(jstest.Ctx(t), StoreConfig{JS: js, Bucket: bucket, Create: true, HoldUntilOrigin: true, Sites: []string{"edge-1", "edge-2"}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func siteReceipt(id, proc string, status receipt.Status) receipt.Receipt {
	return receipt.New(id, "L1A", proc, proc, status, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))
}

// mixedInput returns receipts that exercise every outcome: applied,
// duplicate (the same receipt again, and a re-created one), conflict,
// held (origin unknown), a refusal (not expected), dead letters; and the
// origins to record first. Repeats sit close together and far apart, so
// that a batch of 7 holds some of them and splits others.
func mixedInput() (origins []record.Origin, items []record.BatchItem) {
	at := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for i := 0; i < 12; i++ {
		origins = append(origins, record.Origin{EventID: receipttest.EventID(i), Stream: "L1A", Subject: "events.a", Seq: uint64(i + 1), PublishedAt: at, Expected: []string{"edge-1", "edge-2"}, Digest: receipt.PayloadDigest([]byte("payload"))})
	}
	add := func(r receipt.Receipt) {
		items = append(items, record.BatchItem{Receipt: r, ReceivedAt: at.Add(time.Duration(len(items)) * time.Second)})
	}
	for i := 0; i < 16; i++ { // 12..15 have no origin: held
		r := siteReceipt(receipttest.EventID(i), "edge-1", receipt.StatusProcessed)
		add(r)
		if i%3 == 0 {
			add(r) // redelivered at once
		}
		if i%4 == 1 {
			add(siteReceipt(receipttest.EventID(i), "edge-2", receipt.StatusDeadLettered))
		}
	}
	for i := 0; i < 16; i += 2 {
		add(siteReceipt(receipttest.EventID(i), "edge-2", receipt.StatusProcessed))
		add(siteReceipt(receipttest.EventID(i), "edge-1", receipt.StatusProcessed)) // re-created later: a duplicate
	}
	add(siteReceipt(receipttest.EventID(3), "edge-1", receipt.StatusDeadLettered)) // conflict
	add(siteReceipt(receipttest.EventID(5), "edge-3", receipt.StatusProcessed))    // not expected
	add(receipt.Receipt{EventID: receipttest.EventID(6)})                          // invalid
	return origins, items
}

// indexKeysOf lists the keys of a Store's status index.
func indexKeysOf(t *testing.T, st *Store) []string {
	t.Helper()
	l, err := st.ix.kv.ListKeys(jstest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestStore_ApplyBatch_EqualsPerReceipt applies the same input one receipt
// at a time to one bucket and in batches of 7 to another: every outcome,
// every record and every index key must be the same.
func TestStore_ApplyBatch_EqualsPerReceipt(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	one, batched := openTestStore(t, js, "one"), openTestStore(t, js, "batched")
	origins, items := mixedInput()
	now := time.Date(2026, 1, 2, 3, 0, 1, 0, time.UTC)
	// Half the origins come before the receipts, half after them (their
	// receipts are held, then released), then a repeat and a reuse.
	reused := origins[3]
	reused.Digest, reused.Seq = receipt.PayloadDigest([]byte("another payload")), 99
	applyOrigins := func(os []record.Origin) {
		t.Helper()
		got := batched.ApplyOriginBatch(ctx, os, now)
		for i, o := range os {
			out, hr, err := one.ApplyOriginRelease(ctx, o, now)
			if out != got[i].Outcome || (err == nil) != (got[i].Err == nil) || !reflect.DeepEqual(hr, got[i].Held) {
				t.Errorf("origin %s: one by one %v %+v %v, batched %v %+v %v", o.EventID, out, hr, err, got[i].Outcome, got[i].Held, got[i].Err)
			}
		}
	}
	applyOrigins(origins[:6])
	var want, got []record.BatchResult
	for _, it := range items {
		var r record.BatchResult
		r.Outcome, r.OriginSeq, r.Err = one.ApplyReceipt(ctx, it.Receipt, it.ReceivedAt)
		want = append(want, r)
	}
	for start := 0; start < len(items); start += 7 {
		got = append(got, batched.ApplyBatch(ctx, items[start:min(start+7, len(items))])...)
	}
	for i := range items {
		w, g := want[i], got[i]
		if w.Outcome != g.Outcome || w.OriginSeq != g.OriginSeq || (w.Err == nil) != (g.Err == nil) ||
			errors.Is(g.Err, record.ErrNotExpected) != errors.Is(w.Err, record.ErrNotExpected) {
			t.Errorf("item %d (%s %s %s): per receipt %v %d %v, batched %v %d %v", i,
				items[i].Receipt.EventID, items[i].Receipt.Processor, items[i].Receipt.Status, w.Outcome, w.OriginSeq, w.Err, g.Outcome, g.OriginSeq, g.Err)
		}
	}
	seen := map[record.Outcome]int{}
	refused := 0
	for _, w := range want {
		seen[w.Outcome]++
		if errors.Is(w.Err, record.ErrNotExpected) {
			refused++
		}
	}
	if seen[record.Applied] == 0 || seen[record.Duplicate] == 0 || seen[record.Conflict] == 0 || seen[record.Held] == 0 || refused == 0 {
		t.Fatalf("the input lacks a case: outcomes %v, refused %d", seen, refused)
	}
	applyOrigins(append(slices.Clone(origins[6:]), origins[2], reused, origins[7]))
	a, err := one.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := batched.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("records differ:\nper receipt %+v\nbatched     %+v", a, b)
	}
	if c, err := batched.Get(ctx, receipttest.EventID(3)); err != nil || len(c.Reused) != 1 {
		t.Errorf("event 3: %+v %v; want the reuse recorded", c, err)
	}
	if c, err := batched.Get(ctx, receipttest.EventID(7)); err != nil || len(c.Held) != 0 || c.Processors["edge-1"].Status != receipt.StatusProcessed {
		t.Errorf("event 7: %+v %v; want its held receipt released", c, err)
	}
	if ka, kb := indexKeysOf(t, one), indexKeysOf(t, batched); !slices.Equal(ka, kb) {
		t.Errorf("index differs:\nper receipt %v\nbatched     %v", ka, kb)
	}
	if st := batched.BatchStats(); st.Batches == 0 || st.Fallbacks != 0 {
		t.Errorf("batch stats %+v; want batches and no fallback", st)
	}
}

// TestStore_ApplyBatch_Duplicates: a receipt repeated inside one batch and
// in a later batch is applied once and counted as a duplicate each time,
// with one record write per event and batch.
func TestStore_ApplyBatch_Duplicates(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	st := openTestStore(t, js, "dups")
	st.holdUnknown = false
	r1, r2 := receipttest.Receipt(receipttest.EventID(1)), receipttest.Receipt(receipttest.EventID(2))
	at := time.Now()
	items := []record.BatchItem{{Receipt: r1, ReceivedAt: at}, {Receipt: r1, ReceivedAt: at}, {Receipt: r2, ReceivedAt: at}, {Receipt: r1, ReceivedAt: at}}
	outs := func(rs []record.BatchResult) []record.Outcome {
		var o []record.Outcome
		for _, r := range rs {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			o = append(o, r.Outcome)
		}
		return o
	}
	if got, want := outs(st.ApplyBatch(ctx, items)), []record.Outcome{record.Applied, record.Duplicate, record.Applied, record.Duplicate}; !slices.Equal(got, want) {
		t.Fatalf("first batch %v, want %v", got, want)
	}
	if got, want := outs(st.ApplyBatch(ctx, items[1:3])), []record.Outcome{record.Duplicate, record.Duplicate}; !slices.Equal(got, want) {
		t.Fatalf("second batch %v, want %v", got, want)
	}
	c, err := st.Get(ctx, r1.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Processors[r1.Processor]; p.Duplicates != 3 || p.ReceiptID != r1.ReceiptID {
		t.Fatalf("record %+v; want 3 duplicates", p)
	}
	if bs := st.BatchStats(); bs != (BatchStats{Batches: 2, Records: 4}) {
		t.Fatalf("batch stats %+v; want 2 batches of 4 records in all", bs)
	}
}

// TestStore_ApplyBatch_TwoInstancesRace: two Stores apply the same batch
// at once, several times: each receipt is applied by exactly one of them
// and counted as a duplicate by the other.
func TestStore_ApplyBatch_TwoInstancesRace(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	a, b := openTestStore(t, js, "race"), openTestStore(t, js, "race")
	a.holdUnknown, b.holdUnknown = false, false
	const rounds, n = 5, 40
	for round := 0; round < rounds; round++ {
		var items []record.BatchItem
		for i := 0; i < n; i++ {
			items = append(items, record.BatchItem{Receipt: receipttest.Receipt(fmt.Sprintf("race-%d-%d", round, i)), ReceivedAt: time.Now()})
		}
		var ra, rb []record.BatchResult
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ra = a.ApplyBatch(ctx, items) }()
		go func() { defer wg.Done(); rb = b.ApplyBatch(ctx, items) }()
		wg.Wait()
		for i := range items {
			if ra[i].Err != nil || rb[i].Err != nil {
				t.Fatalf("round %d item %d: %v / %v", round, i, ra[i].Err, rb[i].Err)
			}
			got := []record.Outcome{ra[i].Outcome, rb[i].Outcome}
			slices.Sort(got)
			if !slices.Equal(got, []record.Outcome{record.Applied, record.Duplicate}) {
				t.Fatalf("round %d item %d: outcomes %v, want one applied and one duplicate", round, i, got)
			}
			c, err := a.Get(ctx, items[i].Receipt.EventID)
			if err != nil {
				t.Fatal(err)
			}
			if p := c.Processors["edge-1"]; p.Duplicates != 1 {
				t.Fatalf("round %d item %d: record %+v, want one duplicate", round, i, p)
			}
		}
	}
	t.Logf("a %+v b %+v", a.BatchStats(), b.BatchStats())
}

// TestStore_ApplyBatch_ExpectationFails: another writer changes one record
// between the batch's reads and its commit. Its expectation fails, the
// server refuses the whole batch, and every receipt is applied one by one:
// nothing lost, nothing applied twice, the other writer's receipt kept.
func TestStore_ApplyBatch_ExpectationFails(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	st, other := openTestStore(t, js, "cas"), openTestStore(t, js, "cas")
	st.holdUnknown, other.holdUnknown = false, false
	var items []record.BatchItem
	for i := 0; i < 10; i++ {
		items = append(items, record.BatchItem{Receipt: receipttest.Receipt(receipttest.EventID(i)), ReceivedAt: time.Now()})
	}
	if _, err := st.ApplyOutcome(ctx, items[3].Receipt, time.Now()); err != nil { // an existing record, mid-batch
		t.Fatal(err)
	}
	gs := make([]*batchGroup, len(items))
	for i, it := range items {
		gs[i] = &batchGroup{eventID: it.Receipt.EventID, idx: []int{i}, written: map[idxKey]bool{}}
	}
	st.readGroups(ctx, gs)
	// Between the reads and the commit: another writer, on the existing
	// record and on one the batch will create.
	for _, i := range []int{3, 6} {
		if out, err := other.ApplyOutcome(ctx, siteReceipt(receipttest.EventID(i), "edge-2", receipt.StatusProcessed), time.Now()); err != nil || out != record.Applied {
			t.Fatalf("other writer: %v %v", out, err)
		}
	}
	res := make([]record.BatchResult, len(items))
	st.writeChunk(ctx, items, gs, res)
	for i, r := range res {
		want := record.Applied
		if i == 3 {
			want = record.Duplicate
		}
		if r.Err != nil || r.Outcome != want {
			t.Fatalf("item %d: %v %v, want %v", i, r.Outcome, r.Err, want)
		}
	}
	if bs := st.BatchStats(); bs.Fallbacks != 1 || bs.Batches != 0 {
		t.Fatalf("batch stats %+v; want the one batch refused", bs)
	}
	for i := range items {
		c, err := st.Get(ctx, receipttest.EventID(i))
		if err != nil {
			t.Fatal(err)
		}
		p := c.Processors["edge-1"]
		wantDup := map[bool]int{true: 1, false: 0}[i == 3]
		if p.Status != receipt.StatusProcessed || p.Duplicates != wantDup {
			t.Fatalf("event %d: edge-1 %+v", i, p)
		}
		if _, ok := c.Processors["edge-2"]; ok != (i == 3 || i == 6) {
			t.Fatalf("event %d: edge-2 recorded=%v", i, ok)
		}
	}
}
