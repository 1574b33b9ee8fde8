package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/publish"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology"
)

// 1,000 events that go stale behind a cut edge link end expired at L1,
// each once, when the link is back: none processed, none lost, none
// pending (issue 34's expiry target, as a system test).
func TestSystem_StaleBehindCutLink_AllExpiredOnce(t *testing.T) {
	const expireAfter = 2 * time.Second
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		c.Topology.Events.ExpireAfter = []topology.ExpireRule{{Subject: "events.test", After: topology.Duration(expireAfter)}}
	}}, nil)
	expiredEvents(t, ls, 1000, expireAfter)
}

// expiredEvents publishes fresh events (processed), cuts edge1's link,
// publishes n more that go stale during the cut, restores the link and
// checks that those end expired at L1, once each.
func expiredEvents(t *testing.T, ls *System, n int, expireAfter time.Duration) {
	t.Helper()
	ctx := context.Background()
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	pub, err := publish.New(publish.Config{JS: l1js, Stream: "L1A"})
	if err != nil {
		t.Fatal(err)
	}
	events := func(prefix string, n int) ([]publish.Event, []string) {
		evs, ids := make([]publish.Event, n), make([]string, n)
		for i := range evs {
			ids[i] = fmt.Sprintf("%s-%d", prefix, i)
			evs[i] = publish.Event{ID: ids[i], Subject: "events.test", Data: []byte(`{"k":1}`)}
		}
		return evs, ids
	}
	freshEvs, fresh := events("fresh", 10)
	if _, err := pub.Publish(ctx, freshEvs); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, ls, fresh, "edge1")

	edge := ls.App("edge1")
	ls.Links["edge1"].Cut()
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if edge.UpstreamConnected() {
			return fmt.Errorf("edge still connected")
		}
		return nil
	})
	staleEvs, stale := events("stale", n)
	published := time.Now()
	if _, err := pub.Publish(ctx, staleEvs); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(published.Add(expireAfter + 200*time.Millisecond))) // the events age; nothing is polled
	ls.Links["edge1"].Restore()

	svc := leafline.Completions(ls.App("l1"))
	want := uint64(len(fresh) + n)
	check.For(t, 60*time.Second, 50*time.Millisecond, func() error {
		if got := svc.Stats().Applied; got < want {
			return fmt.Errorf("applied %d of %d; %s", got, want, pathState(ls))
		}
		return nil
	})
	for _, id := range stale {
		c, err := svc.State().Get(ctx, id)
		if err != nil {
			t.Fatalf("event %q: %v", id, err)
		}
		if pr := c.Processors["edge1"]; c.Status != record.EventExpired || pr.Status != receipt.StatusExpired || pr.Conflicts != 0 {
			t.Fatalf("event %q: status %s, edge1 %+v; want expired once", id, c.Status, pr)
		}
	}
	if got := svc.Stats().Applied; got != want {
		t.Fatalf("applied %d receipts for %d events: a receipt was applied twice", got, want)
	}
	sum, err := svc.State().Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Expired != int64(n) || sum.Pending != 0 || sum.Complete != int64(len(fresh)) || sum.DeadLettered != 0 {
		t.Fatalf("summary %+v: want %d expired, %d complete, none pending", sum, n, len(fresh))
	}
	page, _, err := svc.State().List(ctx, record.ListQuery{Status: record.ListExpired, Limit: record.MaxListLimit})
	if err != nil || len(page) != n {
		t.Fatalf("list expired: %d events, %v; want %d", len(page), err, n)
	}
	m := edge
	if got := metricOf(t, m, "leafline_messages_processed_total", nil); got != float64(len(fresh)) {
		t.Errorf("edge processed %v events, want only the %d fresh ones", got, len(fresh))
	}
	if got := metricOf(t, m, "leafline_messages_expired_total", nil); got != float64(n) {
		t.Errorf("edge expired %v events, want %d", got, n)
	}
}
