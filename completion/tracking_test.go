package completion_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

func TestStatus_Lifecycle(t *testing.T) {
	svc, js := completiontest.StartTracking(t, nil)
	ctx := jstest.Ctx(t)

	completiontest.PublishEvent(t, js, "events.a.x", "two-sites")
	completiontest.PublishEvent(t, js, "events.b", "one-site")
	completiontest.PublishEvent(t, js, "events.none", "no-site")
	completiontest.PublishEvent(t, js, "events.b", "dead")

	c := completiontest.WaitStatus(t, svc, "two-sites", record.EventPending)
	if !slices.Equal(c.Expected, []string{"edge-1", "edge-2"}) || !slices.Equal(c.Missing, []string{"edge-1", "edge-2"}) ||
		c.PublishedAt.IsZero() || c.Subject != "events.a.x" || c.OriginStream != "L1A" || c.OriginSeq != 1 || c.Overdue {
		t.Fatalf("pending record %+v", c)
	}
	completiontest.WaitStatus(t, svc, "no-site", record.EventComplete) // nobody is expected
	completiontest.WaitStatus(t, svc, "one-site", record.EventPending)
	completiontest.WaitStatus(t, svc, "dead", record.EventPending)

	if got := completiontest.ListAll(t, svc, record.ListQuery{Status: record.ListPending}); !slices.Equal(got, []string{"dead", "one-site", "two-sites"}) {
		t.Fatalf("pending: %q", got)
	}
	if got := completiontest.ListAll(t, svc, record.ListQuery{Status: record.ListPending, Site: "edge-2"}); !slices.Equal(got, []string{"two-sites"}) {
		t.Fatalf("pending at edge-2: %q", got)
	}

	completiontest.SendReceipt(t, js, "two-sites", "edge-1", receipt.StatusProcessed)
	completiontest.SendReceipt(t, js, "one-site", "edge-1", receipt.StatusProcessed)
	completiontest.SendReceipt(t, js, "dead", "edge-1", receipt.StatusDeadLettered)
	completiontest.WaitStatus(t, svc, "one-site", record.EventComplete)
	completiontest.WaitStatus(t, svc, "dead", record.EventDeadLettered)
	c = completiontest.WaitStatus(t, svc, "two-sites", record.EventPending)
	check.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		if c, _ = svc.Get(ctx, "two-sites"); !slices.Equal(c.Missing, []string{"edge-2"}) {
			return fmt.Errorf("missing %q", c.Missing)
		}
		return nil
	})
	completiontest.SendReceipt(t, js, "two-sites", "edge-2", receipt.StatusProcessed)
	completiontest.WaitStatus(t, svc, "two-sites", record.EventComplete)
	completiontest.SendReceipt(t, js, "one-site", "edge-1", receipt.StatusDeadLettered) // conflict: first status wins
	check.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		if c, _ = svc.Get(ctx, "one-site"); !c.Conflict || c.Status != record.EventComplete {
			return fmt.Errorf("one-site %+v", c)
		}
		return nil
	})

	for _, tt := range []struct {
		q    record.ListQuery
		want []string
	}{
		{record.ListQuery{Status: record.ListPending}, nil},
		{record.ListQuery{Status: record.ListPending, Site: "edge-1"}, nil},
		{record.ListQuery{Status: record.ListDeadLettered}, []string{"dead"}},
		{record.ListQuery{Status: record.ListDeadLettered, Site: "edge-1"}, []string{"dead"}},
		{record.ListQuery{Status: record.ListDeadLettered, Site: "edge-2"}, nil},
		{record.ListQuery{Status: record.ListConflict}, []string{"one-site"}},
		{record.ListQuery{Status: record.ListConflict, Site: "edge-1"}, []string{"one-site"}},
		{record.ListQuery{Status: record.ListOverdue}, nil},
	} {
		t.Run(fmt.Sprintf("%s_%s", tt.q.Status, tt.q.Site), func(t *testing.T) {
			if got := completiontest.ListAll(t, svc, tt.q); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	sum, err := svc.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Events != 4 || sum.Pending != 0 || sum.Complete != 3 || sum.DeadLettered != 1 || sum.Conflict != 1 ||
		sum.Overdue != 0 || sum.OldestPending != nil || sum.Truncated || sum.Instance == nil || sum.Instance.Applied != 4 {
		t.Errorf("summary %+v", sum)
	}
	wantSites := []record.SiteSummary{{Site: "edge-1", DeadLettered: 1, Conflict: 1}, {Site: "edge-2"}, {Site: "edge-3"}}
	if !slices.Equal(sum.Sites, wantSites) {
		t.Errorf("sites %+v, want %+v", sum.Sites, wantSites)
	}
	if st := svc.Stats(); st.OriginTracked != 4 || st.OriginReceived != 4 {
		t.Errorf("stats %+v", st)
	}
	// The tracker's consumer ACKs progress; the origin stream keeps every event.
	info, err := js.Stream(ctx, "L1A")
	if err != nil || info.CachedInfo().State.Msgs != 4 {
		t.Errorf("L1A lost messages: %+v %v", info.CachedInfo().State, err)
	}
}

// TestStatus_ReceiptBeforeOrigin: a receipt that arrives before the origin
// message creates a pending record (origin unknown); the origin merge keeps
// the receipt's data and completes the event.
func TestStatus_ReceiptBeforeOrigin(t *testing.T) {
	// No origin tracking first, so the receipt surely comes first.
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	completiontest.CreateR1(t, js)
	completiontest.CreateL1A(t, js, jetstream.LimitsPolicy)
	svc1, err := completion.NewService(completiontest.Config(js))
	if err != nil {
		t.Fatal(err)
	}
	stop := completiontest.Run(t, svc1)
	r := completiontest.SendReceipt(t, js, "early", "edge-1", receipt.StatusProcessed)
	c := completiontest.WaitStatus(t, svc1, "early", record.EventPending)
	if c.OriginKnown() || c.Missing != nil || c.Overdue {
		t.Fatalf("receipt-only record %+v", c)
	}
	if got := completiontest.ListAll(t, svc1, record.ListQuery{Status: record.ListPending}); !slices.Equal(got, []string{"early"}) {
		t.Fatalf("pending %q", got)
	}
	sum, err := svc1.Summary(ctx)
	if err != nil || sum.Pending != 1 || sum.PendingOriginUnknown != 1 || sum.OldestPending != nil {
		t.Fatalf("summary %+v %v", sum, err)
	}
	stop()

	svc2, err := completion.NewService(completiontest.TrackingConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	completiontest.Run(t, svc2)
	completiontest.PublishEvent(t, js, "events.b", "early")
	c = completiontest.WaitStatus(t, svc2, "early", record.EventComplete)
	if p := c.Processors["edge-1"]; p.ReceiptID != r.ReceiptID || c.PublishedAt.IsZero() || !slices.Equal(c.Expected, []string{"edge-1"}) {
		t.Fatalf("merged record %+v", c)
	}
	if got := completiontest.ListAll(t, svc2, record.ListQuery{Status: record.ListPending}); got != nil {
		t.Fatalf("pending after merge %q", got)
	}
	// The same event_id published again (after the stream's duplicate
	// window) does not change the record: the first publication wins.
	again := record.Origin{EventID: "early", Stream: "L1A", Subject: "events.a.again", Seq: 99, PublishedAt: time.Now(), Expected: []string{"edge-2"}}
	if out, err := svc2.Store().ApplyOrigin(ctx, again, time.Now()); out != record.OriginKnown || err != nil {
		t.Fatalf("ApplyOrigin again = %v, %v", out, err)
	}
	if c2, _ := svc2.Get(ctx, "early"); c2.Subject != "events.b" || c2.Status != record.EventComplete {
		t.Fatalf("record changed by a republished id: %+v", c2)
	}
}

func TestStatus_Overdue(t *testing.T) {
	svc, js := completiontest.StartTracking(t, func(c *completion.ServiceConfig) { c.OverdueAfter = 300 * time.Millisecond })
	ctx := jstest.Ctx(t)
	completiontest.PublishEvent(t, js, "events.a.1", "late-1")
	completiontest.PublishEvent(t, js, "events.a.2", "late-2")
	completiontest.WaitStatus(t, svc, "late-2", record.EventPending)
	completiontest.SendReceipt(t, js, "late-1", "edge-2", receipt.StatusProcessed) // edge-1 still owes both; edge-2 owes late-2
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		got := completiontest.ListAll(t, svc, record.ListQuery{Status: record.ListOverdue})
		if !slices.Equal(got, []string{"late-1", "late-2"}) {
			return fmt.Errorf("overdue %q", got)
		}
		if got := completiontest.ListAll(t, svc, record.ListQuery{Status: record.ListOverdue, Site: "edge-2"}); !slices.Equal(got, []string{"late-2"}) {
			return fmt.Errorf("overdue at edge-2 %q", got)
		}
		return nil
	})
	c, err := svc.Get(ctx, "late-1")
	if err != nil || !c.Overdue || !slices.Equal(c.Missing, []string{"edge-1"}) {
		t.Fatalf("late-1 %+v %v", c, err)
	}
	sum, err := svc.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Pending != 2 || sum.Overdue != 2 || sum.OldestPending == nil || sum.OldestPending.EventID != "late-1" || sum.OldestPending.AgeSeconds < 0.3 {
		t.Errorf("summary %+v", sum)
	}
	sites := map[string]record.SiteSummary{}
	for _, s := range sum.Sites {
		sites[s.Site] = s
	}
	if e1, e2 := sites["edge-1"], sites["edge-2"]; e1.Pending != 2 || e1.Overdue != 2 || e2.Pending != 1 || e2.Overdue != 1 ||
		e2.OldestPending == nil || e2.OldestPending.EventID != "late-2" {
		t.Errorf("sites %+v", sum.Sites)
	}
}

// TestStatus_ListPages pages through many pending events with small pages:
// every event appears exactly once and a page never exceeds its limit.
func TestStatus_ListPages(t *testing.T) {
	svc, js := completiontest.StartTracking(t, nil)
	const n = 250
	var want []string
	for i := 0; i < n; i++ {
		completiontest.PublishEvent(t, js, "events.b", receipttest.EventID(i))
		want = append(want, receipttest.EventID(i))
	}
	for i := 0; i < n; i += 5 { // every fifth completes
		completiontest.SendReceipt(t, js, receipttest.EventID(i), "edge-1", receipt.StatusProcessed)
	}
	want = slices.DeleteFunc(want, func(id string) bool { var i int; fmt.Sscanf(id, "evt-%d", &i); return i%5 == 0 })
	check.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		if st := svc.Stats(); st.Applied != n/5 || st.OriginTracked != n {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	for _, limit := range []int{1, 7, 100, record.MaxListLimit} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			q := record.ListQuery{Status: record.ListPending, Site: "edge-1", Limit: limit}
			var got []string
			for {
				items, next, err := svc.List(jstest.Ctx(t), q)
				if err != nil {
					t.Fatal(err)
				}
				if len(items) > limit {
					t.Fatalf("page of %d items, limit %d", len(items), limit)
				}
				for _, c := range items {
					got = append(got, c.EventID)
				}
				if next == "" {
					break
				}
				q.After = next
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("got %d ids, want %d", len(got), len(want))
			}
		})
	}
	// A cursor is bound to its query.
	_, next, err := svc.List(jstest.Ctx(t), record.ListQuery{Status: record.ListPending, Limit: 1})
	if err != nil || next == "" {
		t.Fatal(next, err)
	}
	if _, _, err := svc.List(jstest.Ctx(t), record.ListQuery{Status: record.ListDeadLettered, After: next}); !errors.Is(err, record.ErrBadQuery) {
		t.Errorf("cursor of another query: %v", err)
	}
}

// TestStatus_IndexRepair: index entries that a crash could leave behind are
// never listed, and List removes those that can never be true again.
func TestStatus_IndexRepair(t *testing.T) {
	svc, js := completiontest.StartTracking(t, nil)
	ctx := jstest.Ctx(t)
	completiontest.PublishEvent(t, js, "events.b", "done")
	completiontest.WaitStatus(t, svc, "done", record.EventPending)
	completiontest.SendReceipt(t, js, "done", "edge-1", receipt.StatusProcessed)
	completiontest.WaitStatus(t, svc, "done", record.EventComplete)
	ix, err := js.KeyValue(ctx, kvstore.DefaultBucket+kvstore.IndexBucketSuffix)
	if err != nil {
		t.Fatal(err)
	}
	tok := base64.RawURLEncoding.EncodeToString([]byte("done"))                              // an index key's event token
	stale := []string{"p.=." + tok, "p.edge-1." + tok, "d.edge-1." + tok, "p.edge-9." + tok} // permanently false: removed
	kept := []string{"d.=." + tok}                                                           // may become true: kept, not listed
	for _, k := range append(slices.Clone(stale), kept...) {
		if _, err := ix.Put(ctx, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ix.Put(ctx, "p.=.a", nil); err != nil { // not a token: skipped
		t.Fatal(err)
	}
	for _, q := range []record.ListQuery{
		{Status: record.ListPending}, {Status: record.ListPending, Site: "edge-1"}, {Status: record.ListDeadLettered, Site: "edge-1"},
		{Status: record.ListDeadLettered}, {Status: record.ListPending, Site: "edge-9"},
	} {
		if got := completiontest.ListAll(t, svc, q); got != nil {
			t.Errorf("%+v: listed stale entries %q", q, got)
		}
	}
	for _, k := range stale {
		if _, err := ix.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s not removed: %v", k, err)
		}
	}
	if _, err := ix.Get(ctx, "d.=."+tok); err != nil {
		t.Errorf("d.=. removed: %v", err)
	}
}

func TestStatus_OriginNeedsLimitsRetention(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	completiontest.CreateR1(t, js)
	completiontest.CreateL1A(t, js, jetstream.InterestPolicy)
	svc, err := completion.NewService(completiontest.TrackingConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Setup(jstest.Ctx(t)); !errors.Is(err, record.ErrIncompatible) {
		t.Fatalf("Setup = %v, want ErrIncompatible", err)
	}
	if err := svc.Run(jstest.Ctx(t)); !errors.Is(err, record.ErrIncompatible) {
		t.Fatalf("Run = %v, want ErrIncompatible", err)
	}
}

// TestStatus_OriginBadMessages: origin messages without a usable event_id
// are counted and ACKed, never tracked; a panicking Expected is retried.
func TestStatus_OriginBadMessages(t *testing.T) {
	panicky := make(chan struct{})
	svc, js := completiontest.StartTracking(t, func(c *completion.ServiceConfig) {
		c.Expected = func(subject string) []string {
			if subject == "events.panic" {
				select {
				case <-panicky:
				default:
					panic("boom")
				}
			}
			if subject == "events.badname" {
				return []string{"not a name"}
			}
			return completiontest.Expected(subject)
		}
	})
	ctx := jstest.Ctx(t)
	if _, err := js.Publish(ctx, "events.b", []byte("no id")); err != nil {
		t.Fatal(err)
	}
	completiontest.PublishEvent(t, js, "events.b", strings.Repeat("x", receipt.MaxEventIDLen+1))
	completiontest.PublishEvent(t, js, "events.badname", "bad-expected")
	completiontest.PublishEvent(t, js, "events.panic", "panics")
	check.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		if st := svc.Stats(); st.OriginSkipped != 3 || st.OriginRetried < 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	close(panicky)
	completiontest.WaitStatus(t, svc, "panics", record.EventPending)
	if _, err := svc.Get(ctx, "bad-expected"); !errors.Is(err, record.ErrNotFound) {
		t.Errorf("bad-expected tracked: %v", err)
	}
}

func TestStatus_NotReady(t *testing.T) {
	nc := &nats.Conn{}
	js, _ := jetstream.New(nc)
	svc, err := completion.NewService(completion.ServiceConfig{JS: js, Stream: "R1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc.Get(ctx, "x"); !errors.Is(err, record.ErrNotReady) {
		t.Error(err)
	}
	if _, _, err := svc.List(ctx, record.ListQuery{Status: record.ListPending}); !errors.Is(err, record.ErrNotReady) {
		t.Error(err)
	}
	if _, _, err := svc.List(ctx, record.ListQuery{}); !errors.Is(err, record.ErrBadQuery) {
		t.Error(err)
	}
	if _, err := svc.Summary(ctx); !errors.Is(err, record.ErrNotReady) {
		t.Error(err)
	}
	var none *completion.Service // a handler built before the Service exists answers 503
	if _, err := none.Get(ctx, "x"); !errors.Is(err, record.ErrNotReady) {
		t.Error(err)
	}
}

func TestNewService_StatusConfig(t *testing.T) {
	js := jstest.Unconnected(t)
	base := func() completion.ServiceConfig { return completion.ServiceConfig{JS: js, Stream: "R1"} }
	for _, tt := range []struct {
		name string
		mod  func(*completion.ServiceConfig)
		want string // "" = valid
	}{
		{"defaults", func(*completion.ServiceConfig) {}, ""},
		{"origin without Expected", func(c *completion.ServiceConfig) { c.OriginStream = "L1A" }, "Expected: required"},
		{"origin is receipts stream", func(c *completion.ServiceConfig) { c.OriginStream = "R1"; c.Expected = completiontest.Expected }, "OriginStream: must differ"},
		{"bad origin name", func(c *completion.ServiceConfig) { c.OriginStream = "L1.A"; c.Expected = completiontest.Expected }, "OriginStream:"},
		{"bad header", func(c *completion.ServiceConfig) {
			c.OriginStream = "L1A"
			c.Expected = completiontest.Expected
			c.OriginHeader = "a b"
		}, "OriginHeader:"},
		{"index is bucket", func(c *completion.ServiceConfig) { c.IndexBucket = kvstore.DefaultBucket }, "IndexBucket: must differ"},
		{"in flight", func(c *completion.ServiceConfig) { c.InFlight = 5000 }, "InFlight:"},
		{"overdue", func(c *completion.ServiceConfig) { c.OverdueAfter = -1 }, "OverdueAfter:"},
		{"sites", func(c *completion.ServiceConfig) { c.Sites = []string{"ok", "not ok"} }, "Sites[1]:"},
		{"streams", func(c *completion.ServiceConfig) { c.Streams = []string{"L1A", "L1.A"} }, "Streams[1]:"},
		{"stream twice", func(c *completion.ServiceConfig) { c.Streams = []string{"L1A", "R1", "L1A"} }, `Streams[2]: "L1A" is listed twice`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base()
			tt.mod(&cfg)
			svc, err := completion.NewService(cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				c := svc.Cfg()
				if c.IndexBucket != kvstore.DefaultBucket+kvstore.IndexBucketSuffix || c.InFlight != completion.DefaultInFlight || c.OverdueAfter != kvstore.DefaultOverdueAfter ||
					c.OriginConsumer != completion.DefaultOriginConsumer || c.OriginHeader != completion.DefaultOriginHeader {
					t.Errorf("defaults not applied: %+v", c)
				}
				return
			}
			if !errors.Is(err, record.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewService = %v, want ErrInvalidConfig mentioning %q", err, tt.want)
			}
		})
	}
}

func TestOpenStore_Config(t *testing.T) {
	_, err := kvstore.OpenStore(context.Background(), kvstore.StoreConfig{Bucket: "a.b", IndexBucket: "a.b", Sites: []string{""}})
	if !errors.Is(err, record.ErrInvalidConfig) {
		t.Fatalf("OpenStore = %v", err)
	}
	for _, want := range []string{"JS: required", "Bucket:", "IndexBucket:", "Sites[0]:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q: %v", want, err)
		}
	}
	_, js := jstest.StartJS(t, jstest.Options{})
	if _, err := kvstore.OpenStore(jstest.Ctx(t), kvstore.StoreConfig{JS: js}); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("OpenStore without Create on an empty server = %v, want ErrBucketNotFound", err)
	}
	st := kvstore.NewStore(jstest.NewKV(t, js, "plain"))
	if _, _, err := st.List(jstest.Ctx(t), record.ListQuery{Status: record.ListPending}); !errors.Is(err, kvstore.ErrNoIndex) {
		t.Errorf("List without index = %v", err)
	}
	if _, err := st.Summary(jstest.Ctx(t)); !errors.Is(err, kvstore.ErrNoIndex) {
		t.Errorf("Summary without index = %v", err)
	}
}

func TestExpectedByFilter(t *testing.T) {
	f := completion.ExpectedByFilter(map[string]string{"edge1": "events.>", "edge2": "events.a.*", "edge3": "", "edge4": "other.>"})
	for _, tt := range []struct {
		subject string
		want    []string
	}{
		{"events.a.x", []string{"edge1", "edge2", "edge3"}},
		{"events.b", []string{"edge1", "edge3"}},
		{"other.z", []string{"edge3", "edge4"}},
		{"x", []string{"edge3"}},
	} {
		if got := f(tt.subject); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.subject, got, tt.want)
		}
	}
	if got := completion.ExpectedByFilter(nil)("events.a"); len(got) != 0 {
		t.Errorf("no processors: %q", got)
	}
}
