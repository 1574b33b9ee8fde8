package receipts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testExpected mimics the topology: edge-1 takes every event, edge-2 only
// events.a.>, and events.none has no processor.
func testExpected(subject string) []string {
	switch {
	case subject == "events.none":
		return nil
	case strings.HasPrefix(subject, "events.a."):
		return []string{"edge-2", "edge-1", "edge-1"} // unsorted, duplicated: ApplyOrigin normalizes
	}
	return []string{"edge-1"}
}

func createL1A(t testing.TB, js jetstream.JetStream, retention jetstream.RetentionPolicy) {
	t.Helper()
	_, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{
		Name: "L1A", Subjects: []string{"events.>"}, Storage: jetstream.FileStorage, Retention: retention,
	})
	if err != nil {
		t.Fatalf("create L1A: %v", err)
	}
}

func statusConfig(js jetstream.JetStream) ServiceConfig {
	cfg := testConfig(js)
	cfg.OriginStream = "L1A"
	cfg.Expected = testExpected
	cfg.Sites = []string{"edge-1", "edge-2", "edge-3"}
	return cfg
}

// startStatus runs a Service with origin tracking on fresh L1A and R1.
func startStatus(t testing.TB, mod func(*ServiceConfig)) (*Service, jetstream.JetStream) {
	t.Helper()
	_, js := startJS(t)
	createR1(t, js)
	createL1A(t, js, jetstream.LimitsPolicy)
	cfg := statusConfig(js)
	if mod != nil {
		mod(&cfg)
	}
	svc, err := NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Setup(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	startService(t, svc)
	return svc, js
}

// publishEvent publishes an origin event with its event_id in Nats-Msg-Id.
func publishEvent(t testing.TB, js jetstream.JetStream, subject, id string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := js.PublishMsg(testCtx(t), m); err != nil {
		t.Fatalf("publish event: %v", err)
	}
}

// sendReceipt publishes a receipt from processor p (site p).
func sendReceipt(t testing.TB, js jetstream.JetStream, id, p string, st Status) Receipt {
	t.Helper()
	r := New(id, "L1A", p, p, st, time.Now())
	if st == StatusDeadLettered {
		r.Reason = "sink: permanent"
	}
	if _, err := js.Publish(testCtx(t), "leafline.receipts."+p, mustEncode(t, r), jetstream.WithMsgID(r.MsgID())); err != nil {
		t.Fatalf("publish receipt: %v", err)
	}
	return r
}

// waitStatus polls until eventID's record has status want.
func waitStatus(t testing.TB, src StatusSource, id string, want EventStatus) Completion {
	t.Helper()
	var c Completion
	check.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		var err error
		if c, err = src.Get(testCtx(t), id); err != nil {
			return err
		}
		if c.Status != want {
			return fmt.Errorf("%q: status %s, want %s", id, c.Status, want)
		}
		return nil
	})
	return c
}

func listAll(t testing.TB, src StatusSource, q ListQuery) []string {
	t.Helper()
	var ids []string
	for page := 0; ; page++ {
		items, next, err := src.List(testCtx(t), q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		for _, c := range items {
			ids = append(ids, c.EventID)
		}
		if next == "" {
			break
		}
		if page > 10_000 {
			t.Fatal("List does not end")
		}
		q.After = next
	}
	slices.Sort(ids)
	return ids
}

func TestStatus_Lifecycle(t *testing.T) {
	svc, js := startStatus(t, nil)
	ctx := testCtx(t)

	publishEvent(t, js, "events.a.x", "two-sites")
	publishEvent(t, js, "events.b", "one-site")
	publishEvent(t, js, "events.none", "no-site")
	publishEvent(t, js, "events.b", "dead")

	c := waitStatus(t, svc, "two-sites", EventPending)
	if !slices.Equal(c.Expected, []string{"edge-1", "edge-2"}) || !slices.Equal(c.Missing, []string{"edge-1", "edge-2"}) ||
		c.PublishedAt.IsZero() || c.Subject != "events.a.x" || c.OriginStream != "L1A" || c.OriginSeq != 1 || c.Overdue {
		t.Fatalf("pending record %+v", c)
	}
	waitStatus(t, svc, "no-site", EventComplete) // nobody is expected
	waitStatus(t, svc, "one-site", EventPending)
	waitStatus(t, svc, "dead", EventPending)

	if got := listAll(t, svc, ListQuery{Status: ListPending}); !slices.Equal(got, []string{"dead", "one-site", "two-sites"}) {
		t.Fatalf("pending: %q", got)
	}
	if got := listAll(t, svc, ListQuery{Status: ListPending, Site: "edge-2"}); !slices.Equal(got, []string{"two-sites"}) {
		t.Fatalf("pending at edge-2: %q", got)
	}

	sendReceipt(t, js, "two-sites", "edge-1", StatusProcessed)
	sendReceipt(t, js, "one-site", "edge-1", StatusProcessed)
	sendReceipt(t, js, "dead", "edge-1", StatusDeadLettered)
	waitStatus(t, svc, "one-site", EventComplete)
	waitStatus(t, svc, "dead", EventDeadLettered)
	c = waitStatus(t, svc, "two-sites", EventPending)
	check.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		if c, _ = svc.Get(ctx, "two-sites"); !slices.Equal(c.Missing, []string{"edge-2"}) {
			return fmt.Errorf("missing %q", c.Missing)
		}
		return nil
	})
	sendReceipt(t, js, "two-sites", "edge-2", StatusProcessed)
	waitStatus(t, svc, "two-sites", EventComplete)
	sendReceipt(t, js, "one-site", "edge-1", StatusDeadLettered) // conflict: first status wins
	check.For(t, 10*time.Second, 10*time.Millisecond, func() error {
		if c, _ = svc.Get(ctx, "one-site"); !c.Conflict || c.Status != EventComplete {
			return fmt.Errorf("one-site %+v", c)
		}
		return nil
	})

	for _, tt := range []struct {
		q    ListQuery
		want []string
	}{
		{ListQuery{Status: ListPending}, nil},
		{ListQuery{Status: ListPending, Site: "edge-1"}, nil},
		{ListQuery{Status: ListDeadLettered}, []string{"dead"}},
		{ListQuery{Status: ListDeadLettered, Site: "edge-1"}, []string{"dead"}},
		{ListQuery{Status: ListDeadLettered, Site: "edge-2"}, nil},
		{ListQuery{Status: ListConflict}, []string{"one-site"}},
		{ListQuery{Status: ListConflict, Site: "edge-1"}, []string{"one-site"}},
		{ListQuery{Status: ListOverdue}, nil},
	} {
		t.Run(fmt.Sprintf("%s_%s", tt.q.Status, tt.q.Site), func(t *testing.T) {
			if got := listAll(t, svc, tt.q); !slices.Equal(got, tt.want) {
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
	wantSites := []SiteSummary{{Site: "edge-1", DeadLettered: 1, Conflict: 1}, {Site: "edge-2"}, {Site: "edge-3"}}
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
	_, js := startJS(t)
	ctx := testCtx(t)
	createR1(t, js)
	createL1A(t, js, jetstream.LimitsPolicy)
	svc1, err := NewService(testConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	stop := startService(t, svc1)
	r := sendReceipt(t, js, "early", "edge-1", StatusProcessed)
	c := waitStatus(t, svc1, "early", EventPending)
	if c.OriginKnown() || c.Missing != nil || c.Overdue {
		t.Fatalf("receipt-only record %+v", c)
	}
	if got := listAll(t, svc1, ListQuery{Status: ListPending}); !slices.Equal(got, []string{"early"}) {
		t.Fatalf("pending %q", got)
	}
	sum, err := svc1.Summary(ctx)
	if err != nil || sum.Pending != 1 || sum.PendingOriginUnknown != 1 || sum.OldestPending != nil {
		t.Fatalf("summary %+v %v", sum, err)
	}
	stop()

	svc2, err := NewService(statusConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	startService(t, svc2)
	publishEvent(t, js, "events.b", "early")
	c = waitStatus(t, svc2, "early", EventComplete)
	if p := c.Processors["edge-1"]; p.ReceiptID != r.ReceiptID || c.PublishedAt.IsZero() || !slices.Equal(c.Expected, []string{"edge-1"}) {
		t.Fatalf("merged record %+v", c)
	}
	if got := listAll(t, svc2, ListQuery{Status: ListPending}); got != nil {
		t.Fatalf("pending after merge %q", got)
	}
	// The same event_id published again (after the stream's duplicate
	// window) does not change the record: the first publication wins.
	again := Origin{EventID: "early", Stream: "L1A", Subject: "events.a.again", Seq: 99, PublishedAt: time.Now(), Expected: []string{"edge-2"}}
	if out, err := svc2.Store().ApplyOrigin(ctx, again, time.Now()); out != OriginKnown || err != nil {
		t.Fatalf("ApplyOrigin again = %v, %v", out, err)
	}
	if c2, _ := svc2.Get(ctx, "early"); c2.Subject != "events.b" || c2.Status != EventComplete {
		t.Fatalf("record changed by a republished id: %+v", c2)
	}
}

func TestStatus_Overdue(t *testing.T) {
	svc, js := startStatus(t, func(c *ServiceConfig) { c.OverdueAfter = 300 * time.Millisecond })
	ctx := testCtx(t)
	publishEvent(t, js, "events.a.1", "late-1")
	publishEvent(t, js, "events.a.2", "late-2")
	waitStatus(t, svc, "late-2", EventPending)
	sendReceipt(t, js, "late-1", "edge-2", StatusProcessed) // edge-1 still owes both; edge-2 owes late-2
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		got := listAll(t, svc, ListQuery{Status: ListOverdue})
		if !slices.Equal(got, []string{"late-1", "late-2"}) {
			return fmt.Errorf("overdue %q", got)
		}
		if got := listAll(t, svc, ListQuery{Status: ListOverdue, Site: "edge-2"}); !slices.Equal(got, []string{"late-2"}) {
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
	sites := map[string]SiteSummary{}
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
	svc, js := startStatus(t, nil)
	const n = 250
	var want []string
	for i := 0; i < n; i++ {
		publishEvent(t, js, "events.b", eventID(i))
		want = append(want, eventID(i))
	}
	for i := 0; i < n; i += 5 { // every fifth completes
		sendReceipt(t, js, eventID(i), "edge-1", StatusProcessed)
	}
	want = slices.DeleteFunc(want, func(id string) bool { var i int; fmt.Sscanf(id, "evt-%d", &i); return i%5 == 0 })
	check.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		if st := svc.Stats(); st.Applied != n/5 || st.OriginTracked != n {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	for _, limit := range []int{1, 7, 100, MaxListLimit} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			q := ListQuery{Status: ListPending, Site: "edge-1", Limit: limit}
			var got []string
			for {
				items, next, err := svc.List(testCtx(t), q)
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
	_, next, err := svc.List(testCtx(t), ListQuery{Status: ListPending, Limit: 1})
	if err != nil || next == "" {
		t.Fatal(next, err)
	}
	if _, _, err := svc.List(testCtx(t), ListQuery{Status: ListDeadLettered, After: next}); !errors.Is(err, ErrBadQuery) {
		t.Errorf("cursor of another query: %v", err)
	}
}

// TestStatus_IndexRepair: index entries that a crash could leave behind are
// never listed, and List removes those that can never be true again.
func TestStatus_IndexRepair(t *testing.T) {
	svc, js := startStatus(t, nil)
	ctx := testCtx(t)
	publishEvent(t, js, "events.b", "done")
	waitStatus(t, svc, "done", EventPending)
	sendReceipt(t, js, "done", "edge-1", StatusProcessed)
	waitStatus(t, svc, "done", EventComplete)
	ix := svc.Store().ix
	tok := idToken("done")
	stale := []string{"p.=." + tok, "p.edge-1." + tok, "d.edge-1." + tok, "p.edge-9." + tok} // permanently false: removed
	kept := []string{"d.=." + tok}                                                           // may become true: kept, not listed
	for _, k := range append(slices.Clone(stale), kept...) {
		if err := ix.put(ctx, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.put(ctx, "p.=.a", nil); err != nil { // not a token: skipped
		t.Fatal(err)
	}
	for _, q := range []ListQuery{
		{Status: ListPending}, {Status: ListPending, Site: "edge-1"}, {Status: ListDeadLettered, Site: "edge-1"},
		{Status: ListDeadLettered}, {Status: ListPending, Site: "edge-9"},
	} {
		if got := listAll(t, svc, q); got != nil {
			t.Errorf("%+v: listed stale entries %q", q, got)
		}
	}
	for _, k := range stale {
		if _, err := ix.kv.Get(ctx, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s not removed: %v", k, err)
		}
	}
	if _, err := ix.kv.Get(ctx, "d.=."+tok); err != nil {
		t.Errorf("d.=. removed: %v", err)
	}
}

func TestStatus_OriginNeedsLimitsRetention(t *testing.T) {
	_, js := startJS(t)
	createR1(t, js)
	createL1A(t, js, jetstream.InterestPolicy)
	svc, err := NewService(statusConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Setup(testCtx(t)); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("Setup = %v, want ErrIncompatible", err)
	}
	if err := svc.Run(testCtx(t)); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("Run = %v, want ErrIncompatible", err)
	}
}

// TestStatus_OriginBadMessages: origin messages without a usable event_id
// are counted and ACKed, never tracked; a panicking Expected is retried.
func TestStatus_OriginBadMessages(t *testing.T) {
	panicky := make(chan struct{})
	svc, js := startStatus(t, func(c *ServiceConfig) {
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
			return testExpected(subject)
		}
	})
	ctx := testCtx(t)
	if _, err := js.Publish(ctx, "events.b", []byte("no id")); err != nil {
		t.Fatal(err)
	}
	publishEvent(t, js, "events.b", strings.Repeat("x", MaxEventIDLen+1))
	publishEvent(t, js, "events.badname", "bad-expected")
	publishEvent(t, js, "events.panic", "panics")
	check.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		if st := svc.Stats(); st.OriginSkipped != 3 || st.OriginRetried < 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	close(panicky)
	waitStatus(t, svc, "panics", EventPending)
	if _, err := svc.Get(ctx, "bad-expected"); !errors.Is(err, ErrNotFound) {
		t.Errorf("bad-expected tracked: %v", err)
	}
}

func TestStatus_NotReady(t *testing.T) {
	nc := &nats.Conn{}
	js, _ := jetstream.New(nc)
	svc, err := NewService(ServiceConfig{JS: js, Stream: "R1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc.Get(ctx, "x"); !errors.Is(err, ErrNotReady) {
		t.Error(err)
	}
	if _, _, err := svc.List(ctx, ListQuery{Status: ListPending}); !errors.Is(err, ErrNotReady) {
		t.Error(err)
	}
	if _, _, err := svc.List(ctx, ListQuery{}); !errors.Is(err, ErrBadQuery) {
		t.Error(err)
	}
	if _, err := svc.Summary(ctx); !errors.Is(err, ErrNotReady) {
		t.Error(err)
	}
	var none *Service // a handler built before the Service exists answers 503
	if _, err := none.Get(ctx, "x"); !errors.Is(err, ErrNotReady) {
		t.Error(err)
	}
}

func TestNewService_StatusConfig(t *testing.T) {
	js := connectJSNoServer(t)
	base := func() ServiceConfig { return ServiceConfig{JS: js, Stream: "R1"} }
	for _, tt := range []struct {
		name string
		mod  func(*ServiceConfig)
		want string // "" = valid
	}{
		{"defaults", func(*ServiceConfig) {}, ""},
		{"origin without Expected", func(c *ServiceConfig) { c.OriginStream = "L1A" }, "Expected: required"},
		{"origin is receipts stream", func(c *ServiceConfig) { c.OriginStream = "R1"; c.Expected = testExpected }, "OriginStream: must differ"},
		{"bad origin name", func(c *ServiceConfig) { c.OriginStream = "L1.A"; c.Expected = testExpected }, "OriginStream:"},
		{"bad header", func(c *ServiceConfig) { c.OriginStream = "L1A"; c.Expected = testExpected; c.OriginHeader = "a b" }, "OriginHeader:"},
		{"index is bucket", func(c *ServiceConfig) { c.IndexBucket = DefaultBucket }, "IndexBucket: must differ"},
		{"in flight", func(c *ServiceConfig) { c.InFlight = 5000 }, "InFlight:"},
		{"overdue", func(c *ServiceConfig) { c.OverdueAfter = -1 }, "OverdueAfter:"},
		{"sites", func(c *ServiceConfig) { c.Sites = []string{"ok", "not ok"} }, "Sites[1]:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base()
			tt.mod(&cfg)
			svc, err := NewService(cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				c := svc.cfg
				if c.IndexBucket != DefaultBucket+IndexBucketSuffix || c.InFlight != DefaultInFlight || c.OverdueAfter != DefaultOverdueAfter ||
					c.OriginConsumer != DefaultOriginConsumer || c.OriginHeader != DefaultOriginHeader {
					t.Errorf("defaults not applied: %+v", c)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewService = %v, want ErrInvalidConfig mentioning %q", err, tt.want)
			}
		})
	}
}

func TestOpenStore_Config(t *testing.T) {
	_, err := OpenStore(context.Background(), StoreConfig{Bucket: "a.b", IndexBucket: "a.b", Sites: []string{""}})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("OpenStore = %v", err)
	}
	for _, want := range []string{"JS: required", "Bucket:", "IndexBucket:", "Sites[0]:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q: %v", want, err)
		}
	}
	_, js := startJS(t)
	if _, err := OpenStore(testCtx(t), StoreConfig{JS: js}); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("OpenStore without Create on an empty server = %v, want ErrBucketNotFound", err)
	}
	st := NewStore(newKV(t, js, "plain"))
	if _, _, err := st.List(testCtx(t), ListQuery{Status: ListPending}); !errors.Is(err, ErrNoIndex) {
		t.Errorf("List without index = %v", err)
	}
	if _, err := st.Summary(testCtx(t)); !errors.Is(err, ErrNoIndex) {
		t.Errorf("Summary without index = %v", err)
	}
}

func TestExpectedByFilter(t *testing.T) {
	f := ExpectedByFilter(map[string]string{"edge1": "events.>", "edge2": "events.a.*", "edge3": "", "edge4": "other.>"})
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
	if got := ExpectedByFilter(nil)("events.a"); len(got) != 0 {
		t.Errorf("no processors: %q", got)
	}
}
