package outbox

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

var errBoom = errors.New("boom")

func TestState_String(t *testing.T) {
	for s, want := range map[State]string{StatePending: "pending", StatePublished: "published", 7: "State(7)"} {
		if got := s.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", s, got, want)
		}
	}
}

func TestOutbox_Commit(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, o *Outbox, clk *testClock)
	}{
		{"new", func(t *testing.T, o *Outbox, clk *testClock) {
			out := mustCommit(t, o, recs("a", "b")...)
			for i, key := range []string{"a", "b"} {
				want := Record{Key: key, Subject: "receipts.edge1", Data: []byte("data-" + key),
					Seq: uint64(i + 1), State: StatePending, CreatedAt: clk.peek()}
				if !reflect.DeepEqual(out[i], want) {
					t.Errorf("out[%d] = %+v, want %+v", i, out[i], want)
				}
				if got := mustGet(t, o, key); !reflect.DeepEqual(got, want) {
					t.Errorf("Get(%q) = %+v, want %+v", key, got, want)
				}
			}
		}},
		{"duplicate", func(t *testing.T, o *Outbox, clk *testClock) {
			first := mustCommit(t, o, rec("a"))[0]
			clk.Advance(time.Minute)
			again := rec("a")
			again.Data = []byte("different")
			out := mustCommit(t, o, again, rec("b"))
			if !reflect.DeepEqual(out[0], first) {
				t.Errorf("duplicate returned %+v, want stored %+v", out[0], first)
			}
			if out[1].Seq != 2 {
				t.Errorf("b.Seq = %d, want 2", out[1].Seq)
			}
			if s := mustStats(t, o); s.Pending != 2 {
				t.Errorf("Pending = %d, want 2", s.Pending)
			}
		}},
		{"duplicate within batch", func(t *testing.T, o *Outbox, clk *testClock) {
			in := recs("a", "b", "a")
			in[2].Data = []byte("later")
			out := mustCommit(t, o, in...)
			if !reflect.DeepEqual(out[2], out[0]) || out[0].Seq != 1 || out[1].Seq != 2 {
				t.Errorf("out = %+v", out)
			}
			if got := mustGet(t, o, "a"); string(got.Data) != "data-a" {
				t.Errorf("stored Data = %q, want the first occurrence", got.Data)
			}
			if s := mustStats(t, o); s.Pending != 2 {
				t.Errorf("Pending = %d, want 2", s.Pending)
			}
		}},
		{"duplicate of a published record", func(t *testing.T, o *Outbox, clk *testClock) {
			mustCommit(t, o, rec("a"))
			if err := o.MarkPublished([]string{"a"}); err != nil {
				t.Fatal(err)
			}
			out := mustCommit(t, o, rec("a"))
			if out[0].State != StatePublished || out[0].PublishedAt.IsZero() {
				t.Errorf("got %+v, want the published record", out[0])
			}
		}},
		{"callback error rolls back everything", func(t *testing.T, o *Outbox, clk *testClock) {
			_, err := o.Commit(recs("a", "b"), func(tx *bbolt.Tx) error {
				b, err := tx.CreateBucket([]byte("biz"))
				if err != nil {
					return err
				}
				if err := b.Put([]byte("a"), []byte("business")); err != nil {
					return err
				}
				return errBoom
			})
			if !errors.Is(err, errBoom) {
				t.Fatalf("err = %v, want errBoom", err)
			}
			if _, ok, _ := o.Get("a"); ok {
				t.Error("record a stored despite the callback error")
			}
			_ = o.DB().View(func(tx *bbolt.Tx) error {
				if tx.Bucket([]byte("biz")) != nil {
					t.Error("callback's bucket survived the rollback")
				}
				return nil
			})
			if s := mustStats(t, o); s != (Stats{}) {
				t.Errorf("Stats = %+v, want zero", s)
			}
			// Not fatal: the next commit works and reuses the Seq.
			if out := mustCommit(t, o, rec("c")); out[0].Seq != 1 {
				t.Errorf("Seq after rollback = %d, want 1", out[0].Seq)
			}
		}},
		{"callback writes are visible after commit", func(t *testing.T, o *Outbox, clk *testClock) {
			_, err := o.Commit(recs("a"), func(tx *bbolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("biz"))
				if err != nil {
					return err
				}
				return b.Put([]byte("a"), []byte("business"))
			})
			if err != nil {
				t.Fatal(err)
			}
			_ = o.DB().View(func(tx *bbolt.Tx) error {
				if b := tx.Bucket([]byte("biz")); b == nil || string(b.Get([]byte("a"))) != "business" {
					t.Error("business record missing after commit")
				}
				return nil
			})
			if err := o.Check(); err != nil {
				t.Errorf("Check: %v", err)
			}
		}},
		{"callback only", func(t *testing.T, o *Outbox, clk *testClock) {
			called := false
			out, err := o.Commit(nil, func(*bbolt.Tx) error { called = true; return nil })
			if err != nil || !called || out == nil || len(out) != 0 {
				t.Errorf("out %v, err %v, called %v", out, err, called)
			}
		}},
		{"empty", func(t *testing.T, o *Outbox, clk *testClock) {
			out, err := o.Commit(nil, nil)
			if err != nil || out == nil || len(out) != 0 {
				t.Errorf("out %v, err %v", out, err)
			}
		}},
		{"empty data is stored as nil", func(t *testing.T, o *Outbox, clk *testClock) {
			r := rec("a")
			r.Data = []byte{}
			out := mustCommit(t, o, r)
			if got := mustGet(t, o, "a"); !reflect.DeepEqual(got, out[0]) || got.Data != nil {
				t.Errorf("Get = %+v, Commit returned %+v", got, out[0])
			}
		}},
		{"callback panic propagates and rolls back", func(t *testing.T, o *Outbox, clk *testClock) {
			func() {
				defer func() {
					if r := recover(); r != "callback bug" {
						t.Errorf("recovered %v, want the callback's panic", r)
					}
				}()
				_, _ = o.Commit(recs("a"), func(*bbolt.Tx) error { panic("callback bug") })
			}()
			if _, ok, err := o.Get("a"); ok || err != nil {
				t.Errorf("Get after panic: ok %v, err %v", ok, err)
			}
			mustCommit(t, o, rec("b"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, clk := openTest(t)
			tt.run(t, o, clk)
		})
	}
}

func TestOutbox_Commit_Invalid(t *testing.T) {
	tests := []struct {
		name string
		rec  Record
	}{
		{"empty key", Record{Subject: "s"}},
		{"key too long", Record{Key: strings.Repeat("k", MaxKeyLen+1), Subject: "s"}},
		{"empty subject", Record{Key: "k"}},
		{"data too large", Record{Key: "k", Subject: "s", Data: make([]byte, MaxDataLen+1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := openTest(t)
			called := false
			_, err := o.Commit([]Record{rec("ok"), tt.rec}, func(*bbolt.Tx) error { called = true; return nil })
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("err = %v, want ErrInvalidRecord", err)
			}
			if called {
				t.Error("callback ran for an invalid batch")
			}
			if _, ok, _ := o.Get("ok"); ok {
				t.Error("valid record of an invalid batch was stored")
			}
		})
	}
	t.Run("key of MaxKeyLen is fine", func(t *testing.T) {
		o, _ := openTest(t)
		mustCommit(t, o, Record{Key: strings.Repeat("k", MaxKeyLen), Subject: "s"})
	})
}

func TestOutbox_MarkPublished(t *testing.T) {
	o, clk := openTest(t)
	mustCommit(t, o, recs("a", "b", "c")...)
	t1 := clk.Advance(time.Second)
	if err := o.MarkPublished([]string{"a", "unknown", "a", "c"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if err := o.MarkPublished([]string{"a"}); err != nil { // already published: untouched
		t.Fatal(err)
	}
	if err := o.MarkPublished(nil); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]State{"a": StatePublished, "b": StatePending, "c": StatePublished} {
		r := mustGet(t, o, key)
		if r.State != want {
			t.Errorf("%s: state %s, want %s", key, r.State, want)
		}
		if want == StatePublished && !r.PublishedAt.Equal(t1) {
			t.Errorf("%s: PublishedAt %v, want %v", key, r.PublishedAt, t1)
		}
		if want == StatePending && !r.PublishedAt.IsZero() {
			t.Errorf("%s: PublishedAt %v, want zero", key, r.PublishedAt)
		}
	}
	if s := mustStats(t, o); s.Pending != 1 || s.Published != 2 {
		t.Errorf("Stats = %+v", s)
	}
	if err := o.Check(); err != nil {
		t.Error(err)
	}
}

// CommitMark marks and commits in one transaction: the marks first (a
// record committed again there comes back published), and a failing fn
// leaves neither.
func TestOutbox_CommitMark(t *testing.T) {
	o, clk := openTest(t)
	mustCommit(t, o, recs("a", "b")...)
	t1 := clk.Advance(time.Second)
	stored := mustCommit(t, o, recs("a", "b")...) // stored again: returned as they are
	if _, err := o.CommitMark(recs("c"), stored[:1], func(*bbolt.Tx) error { return errBoom }); !errors.Is(err, errBoom) {
		t.Fatalf("fn failing: got %v, want errBoom", err)
	}
	if r := mustGet(t, o, "a"); r.State != StatePending {
		t.Fatalf("a marked by a rolled back CommitMark: %+v", r)
	}
	// a by Key and Seq, b by Key alone, a wrong Seq falls back to the Key.
	marks := []Record{stored[0], {Key: "b"}, {Key: "unknown"}, {Key: "b", Seq: 1}, {Key: "a", Seq: 99}}
	out, err := o.CommitMark(recs("c", "b"), marks, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].State != StatePending || out[1].State != StatePublished || !out[1].PublishedAt.Equal(t1) {
		t.Fatalf("returned %+v", out)
	}
	for key, want := range map[string]State{"a": StatePublished, "b": StatePublished, "c": StatePending} {
		if r := mustGet(t, o, key); r.State != want {
			t.Errorf("%s: state %s, want %s", key, r.State, want)
		}
	}
	if _, err := o.CommitMark(nil, []Record{{Key: "c", Seq: out[0].Seq}}, nil); err != nil {
		t.Fatal(err)
	}
	if s := mustStats(t, o); s.Pending != 0 || s.Published != 3 {
		t.Errorf("Stats = %+v", s)
	}
	if err := o.Check(); err != nil {
		t.Error(err)
	}
}

func TestOutbox_Pending(t *testing.T) {
	o, clk := openTest(t)
	t0 := clk.peek()
	mustCommit(t, o, rec("a"))
	clk.Advance(time.Second)
	mustCommit(t, o, rec("b"))
	clk.Advance(time.Second)
	mustCommit(t, o, rec("c"))
	clk.Advance(-time.Hour) // wall clock stepped back: d has the highest Seq and the oldest CreatedAt
	mustCommit(t, o, rec("d"))
	if err := o.MarkPublished([]string{"c"}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		limit  int
		before time.Time
		want   []string
	}{
		{"all, oldest first", 0, time.Time{}, []string{"a", "b", "d"}},
		{"limit", 2, time.Time{}, []string{"a", "b"}},
		{"age filter is inclusive", 0, t0.Add(time.Second), []string{"a", "b", "d"}},
		{"age filter skips young records", 0, t0, []string{"a", "d"}},
		{"age filter with limit", 1, t0.Add(-time.Minute), []string{"d"}},
		{"nothing old enough", 0, t0.Add(-2 * time.Hour), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := o.Pending(tt.limit, tt.before)
			if err != nil {
				t.Fatal(err)
			}
			if k := keysOf(got); len(k)+len(tt.want) > 0 && !reflect.DeepEqual(k, tt.want) {
				t.Errorf("got %v, want %v", k, tt.want)
			}
			for _, r := range got {
				if r.State != StatePending || string(r.Data) != "data-"+r.Key {
					t.Errorf("bad record %+v", r)
				}
			}
		})
	}
}

func TestOutbox_Pending_CopiesData(t *testing.T) {
	o, _ := openTest(t)
	mustCommit(t, o, recs("a", "b")...)
	got, err := o.Pending(0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// Writes after the read transaction must not change what it returned.
	for i := range 200 {
		mustCommit(t, o, rec(fmt.Sprintf("fill-%03d", i)))
	}
	if err := o.MarkPublished([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if string(r.Data) != "data-"+r.Key || r.State != StatePending {
			t.Errorf("record changed after its transaction: %+v", r)
		}
	}
}

func TestOutbox_Stats(t *testing.T) {
	o, clk := openTest(t)
	if s := mustStats(t, o); s != (Stats{}) {
		t.Errorf("empty: %+v", s)
	}
	t0 := clk.peek()
	mustCommit(t, o, recs("a", "b")...)
	t1 := clk.Advance(time.Second)
	mustCommit(t, o, rec("c"))
	steps := []struct {
		mark       []string
		pend, publ int
		oldest     time.Time
	}{
		{nil, 3, 0, t0},
		{[]string{"b"}, 2, 1, t0},
		{[]string{"a"}, 1, 2, t1},
		{[]string{"c"}, 0, 3, time.Time{}},
	}
	for i, st := range steps {
		if err := o.MarkPublished(st.mark); err != nil {
			t.Fatal(err)
		}
		s := mustStats(t, o)
		if s.Pending != st.pend || s.Published != st.publ || !s.OldestPending.Equal(st.oldest) {
			t.Errorf("step %d: %+v, want pending %d published %d oldest %v", i, s, st.pend, st.publ, st.oldest)
		}
	}
}

func TestOutbox_Prune(t *testing.T) {
	o, clk := openTest(t)
	mustCommit(t, o, recs("a", "b", "c", "d")...)
	t1 := clk.Advance(time.Minute)
	if err := o.MarkPublished([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	t2 := clk.Advance(time.Minute)
	if err := o.MarkPublished([]string{"c"}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		before time.Time
		limit  int
		want   int
		gone   []string
	}{
		{t1, 0, 0, nil},                // strictly before
		{t2, 1, 1, []string{"a"}},      // limit, oldest first
		{t2, 0, 1, []string{"a", "b"}}, // the rest published at t1
		{t2.Add(time.Hour), 0, 1, []string{"a", "b", "c"}},
		{t2.Add(time.Hour), 0, 0, []string{"a", "b", "c"}}, // d is pending: never pruned
	}
	for i, st := range steps {
		n, err := o.Prune(st.before, st.limit)
		if err != nil || n != st.want {
			t.Fatalf("step %d: Prune = %d, %v, want %d", i, n, err, st.want)
		}
		for _, k := range st.gone {
			if _, ok, _ := o.Get(k); ok {
				t.Errorf("step %d: %s still stored", i, k)
			}
		}
	}
	if s := mustStats(t, o); s.Pending != 1 || s.Published != 0 {
		t.Errorf("Stats = %+v", s)
	}
	mustGet(t, o, "d")
	// Caveat: a pruned key can be committed again, as a new record.
	if out := mustCommit(t, o, rec("a")); out[0].Seq != 5 || out[0].State != StatePending {
		t.Errorf("re-commit after prune = %+v", out[0])
	}
	if err := o.Check(); err != nil {
		t.Error(err)
	}
}

// TestOutbox_Check_Invariants breaks one outbox invariant at a time behind
// the outbox's back and expects Check to name it.
func TestOutbox_Check_Invariants(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(tx *bbolt.Tx) error
		want   string
	}{
		{"pending index entry missing", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketPending).Delete(u64(2))
		}, `pending record "b" (seq 2) has no pending index entry`},
		{"pending index entry dangling", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketPending).Put(u64(9), []byte("ghost"))
		}, `missing record "ghost"`},
		{"pending index points at a published record", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketPending).Put(u64(1), []byte("a"))
		}, `points at record "a" with seq 1, state published`},
		{"counter wrong", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(metaPending, u64(5))
		}, "pending: counter 5, records 2"},
		{"record damaged", func(tx *bbolt.Tx) error {
			b := tx.Bucket(bucketRecords)
			v := bytes.Clone(b.Get([]byte("c")))
			v[len(v)-6] ^= 0x01
			return b.Put([]byte("c"), v)
		}, `record "c": checksum mismatch`},
		{"record under another key", func(tx *bbolt.Tx) error {
			b := tx.Bucket(bucketRecords)
			return b.Put([]byte("x"), bytes.Clone(b.Get([]byte("c"))))
		}, `record "x": checksum mismatch`},
		{"seq above the bucket sequence", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketRecords).SetSequence(1)
		}, "outside (0, 1]"},
		{"published index entry missing", func(tx *bbolt.Tx) error {
			c := tx.Bucket(bucketPublished).Cursor()
			k, _ := c.First()
			return tx.Bucket(bucketPublished).Delete(k)
		}, `published record "a" (seq 1) has no published index entry`},
		{"mark without a record", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketMarks).Put(u64(7), u64(1))
		}, "mark of seq 7 has no record"},
		{"mark on a schema 1 published record", func(tx *bbolt.Tx) error {
			b, _ := getBuckets(tx)
			r, err := b.load([]byte("a"), b.records.Get([]byte("a")))
			if err != nil {
				return err
			}
			return b.records.Put([]byte("a"), encodeRecord(&r)) // says published itself, and has a mark
		}, `record "a" (seq 1) is marked published twice`},
		{"schema missing", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketMeta).Delete(metaSchema)
		}, "schema version missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _ := openTest(t)
			mustCommit(t, o, recs("a", "b", "c")...)
			if err := o.MarkPublished([]string{"a"}); err != nil {
				t.Fatal(err)
			}
			if err := o.Check(); err != nil {
				t.Fatalf("Check before: %v", err)
			}
			if err := o.DB().Update(tt.break_); err != nil {
				t.Fatal(err)
			}
			err := o.Check()
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), o.Path()) {
				t.Fatalf("Check = %v\nwant ErrCorrupt naming the file and containing %q", err, tt.want)
			}
		})
	}
}

func TestOutbox_FatalErrorPoisonsWrites(t *testing.T) {
	o, _ := openTest(t)
	mustCommit(t, o, rec("a"))
	// Damage a record so that MarkPublished fails with ErrCorrupt.
	if err := o.DB().Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketRecords).Put([]byte("a"), []byte("garbage"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := o.MarkPublished([]string{"a"}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("MarkPublished = %v, want ErrCorrupt", err)
	}
	_, err := o.Commit(recs("b"), nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "refusing writes") {
		t.Fatalf("Commit after a fatal error = %v", err)
	}
	if _, _, err := o.Get("a"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Get = %v, want ErrCorrupt", err)
	}
}

// --- damaged files ---

func TestRecordCodec(t *testing.T) {
	f := func(r Record) {
		t.Helper()
		got, err := decodeRecord([]byte(r.Key), encodeRecord(&r))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip: %+v, want %+v", got, r)
		}
	}
	now := normalTime(time.Now())
	f(Record{Key: "k", Subject: "s", Seq: 1, State: StatePending, CreatedAt: now})
	f(Record{Key: "k", Subject: "s.x.y", Data: []byte{0, 1, 2}, Seq: 1 << 60, State: StatePublished, CreatedAt: now, PublishedAt: now.Add(time.Second)})
	enc := encodeRecord(&Record{Key: "k", Subject: "s", Seq: 1, State: StatePending})
	for i := range enc {
		for bit := range 8 {
			b := bytes.Clone(enc)
			b[i] ^= 1 << bit
			if _, err := decodeRecord([]byte("k"), b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip of byte %d bit %d not detected: %v", i, bit, err)
			}
		}
	}
	for n := range len(enc) {
		if _, err := decodeRecord([]byte("k"), enc[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncation to %d bytes not detected", n)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte("k"), encodeRecord(&Record{Key: "k", Subject: "s", Data: []byte("d"), Seq: 3, State: StatePending}))
	f.Fuzz(func(t *testing.T, key, v []byte) {
		r, err := decodeRecord(key, v)
		if err != nil {
			return
		}
		if again := encodeRecord(&r); !bytes.Equal(again, v) {
			t.Errorf("decoded %x to %+v, which encodes to %x", v, r, again)
		}
	})
}

func BenchmarkCommit(b *testing.B) {
	for _, batch := range []int{1, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			o, _ := openTest(b)
			data := bytes.Repeat([]byte("r"), 200) // a typical encoded receipt
			n := 0
			in := make([]Record, batch)
			b.ReportAllocs()
			for b.Loop() {
				for i := range in {
					in[i] = Record{Key: "event-" + strconv.Itoa(n), Subject: "receipts.edge1", Data: data}
					n++
				}
				if _, err := o.Commit(in, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
		})
	}
}
