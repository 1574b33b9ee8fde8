package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leafline/leafline/completion/record"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/publish"
	"github.com/leafline/leafline/topology"
)

// Urgent events published behind a backlog of normal ones at a cut edge
// link overtake it once the link is back: the edge processes each of them
// before the last of the backlog, and every event completes once.
func TestSystem_UrgentOvertakesBacklog(t *testing.T) {
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		c.Topology.Events.Priorities = []topology.Priority{{Name: "urgent", Subjects: []string{"events.urgent.>"}}}
	}}, nil)
	events := func(prefix, subject string, n int) []string {
		return publishClassed(t, ls, prefix, n, func(int) string { return subject })
	}
	ls.Links["edge1"].Cut()
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if ls.App("edge1").UpstreamConnected() {
			return fmt.Errorf("edge still connected")
		}
		return nil
	})
	normal := events("normal", "events.test", 5000)
	urgent := events("urgent", "events.urgent.alarm", 5)
	// Both are at the hub before the link is back.
	time.Sleep(500 * time.Millisecond)
	ls.Links["edge1"].Restore()
	waitCompleted(t, ls, append(normal, urgent...), "edge1")

	overtook(t, ls, normal, urgent, "processed", func(p record.ProcessorRecord) time.Time { return p.ProcessedAt })
}

// Receipts of urgent events overtake a backlog of other receipts waiting
// at the edge behind a cut, capped link: the edge's receipts of the class
// go in their lane, which the hub and L1 take by links and a consumer of
// their own, and L1 applies each of them before the backlog's last.
func TestSystem_UrgentReceiptsOvertakeBacklog(t *testing.T) {
	gate := make(chan struct{})
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		c.Topology.Events.Priorities = []topology.Priority{{Name: "urgent", Subjects: []string{"events.urgent.>"}}}
		c.Topology.Bandwidth = "16KB/s"
	}}, func(site string) []edge.Option {
		if site != "edge1" {
			return nil
		}
		return []edge.Option{edge.WithRunnerHooks(runner.Hooks{Gate: gate})}
	})
	// 400 events wait at the edge, its runner held; the link is cut,
	// and the runner processes them: their receipts wait at the edge.
	normal := publishClassed(t, ls, "normal", 400, func(int) string { return "events.test" })
	waitHolds(t, ls, "edge1", "L2A", len(normal), 60*time.Second)
	ls.Links["edge1"].Cut()
	close(gate)
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n := metricOf(t, ls.App("edge1"), "leafline_messages_processed_total", nil); n < float64(len(normal)) {
			return fmt.Errorf("edge1 processed %v of %d", n, len(normal))
		}
		return nil
	})
	urgent := publishClassed(t, ls, "urgent", 5, func(int) string { return "events.urgent.alarm" })
	ls.Links["edge1"].Restore()
	waitCompleted(t, ls, append(normal, urgent...), "edge1")

	overtook(t, ls, normal, urgent, "receipt applied", func(p record.ProcessorRecord) time.Time { return p.ReceivedAt })
}

// A class removed from the topology while its stream at the edge still
// holds events: the edge's runner drains them after the restart.
func TestSystem_RemovedClassIsDrained(t *testing.T) {
	gate := make(chan struct{})
	starts := 0
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		c.Topology.Events.Priorities = []topology.Priority{{Name: "urgent", Subjects: []string{"events.urgent.>"}}}
	}}, func(site string) []edge.Option {
		if site != "edge1" {
			return nil
		}
		if starts++; starts > 1 {
			return nil
		}
		return []edge.Option{edge.WithRunnerHooks(runner.Hooks{Gate: gate})} // held: the events wait in L2A_URGENT
	})
	ctx := context.Background()
	ids := publishClassed(t, ls, "urgent", 10, func(int) string { return "events.urgent.alarm" })
	waitHolds(t, ls, "edge1", "L2A_URGENT", 10, 30*time.Second)
	// The runner is held: the edge counts them waiting in their class.
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := metricOf(t, ls.App("edge1"), "leafline_events_waiting", map[string]string{"class": "urgent"}); n != 10 {
			return fmt.Errorf("events_waiting{class=urgent} %v, want 10", n)
		}
		return nil
	})
	// The hub has trimmed them (both of edge1's links took them) but
	// the newest, its own link's mark: the edge's normal link cannot
	// bring them again.
	hubJS := jstest.ConnectURL(t, ls.App("hub").ClientURL())
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		s, err := hubJS.Stream(ctx, "HA")
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.Msgs; n > 1 {
			return fmt.Errorf("HA holds %d", n)
		}
		return nil
	})
	if n := metricOf(t, ls.App("edge1"), "leafline_messages_processed_total", nil); n != 0 {
		t.Fatalf("edge1 processed %v events while its runner was held", n)
	}
	if err := ls.Stop("edge1"); err != nil {
		t.Fatal(err)
	}
	close(gate)
	ls.Topology.Events.Priorities = nil
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := ls.Start(sctx, "edge1"); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, ls, ids, "edge1")
}

// An edge given a class before its hub: the hub serves no consumer for
// the class, so the edge's own link keeps carrying the class's events
// (it leaves them to the class's link only once that link has found its
// consumer) and every event completes.
func TestSystem_ClassAtTheEdgeBeforeTheHub(t *testing.T) {
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		if c.Site != "edge1" {
			return
		}
		own := *c.Topology
		own.Events.Priorities = []topology.Priority{{Name: "urgent", Subjects: []string{"events.urgent.>"}}}
		c.Topology = &own
	}}, nil)
	ctx := context.Background()
	ids := publishClassed(t, ls, "early", 20, func(i int) string { return []string{"events.urgent.alarm", "events.test"}[i%2] })
	waitCompleted(t, ls, ids, "edge1")
	// edge1 did take the class: it has the class's stream.
	if _, err := jstest.ConnectURL(t, ls.App("edge1").ClientURL()).Stream(ctx, "L2A_URGENT"); err != nil {
		t.Fatalf("edge1's stream of the class: %v", err)
	}
}

// publishClassed publishes n events at L1, the i-th with the id
// "<prefix>-<i>" on subject(i), and returns their ids.
func publishClassed(t *testing.T, ls *System, prefix string, n int, subject func(i int) string) []string {
	t.Helper()
	pub, err := publish.New(publish.Config{JS: jstest.ConnectURL(t, ls.App("l1").ClientURL()), Stream: "L1A"})
	if err != nil {
		t.Fatal(err)
	}
	evs, ids := make([]publish.Event, n), make([]string, n)
	for i := range evs {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		evs[i] = publish.Event{ID: ids[i], Subject: subject(i), Data: []byte(`{"k":1}`)}
	}
	if _, err := pub.Publish(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	return ids
}

// overtook checks that each urgent event's time at (edge1's entry in its
// completion at L1) is before every normal event's.
func overtook(t *testing.T, ls *System, normal, urgent []string, what string, at func(record.ProcessorRecord) time.Time) {
	t.Helper()
	svc := leafline.Completions(ls.App("l1"))
	of := func(id string) time.Time {
		c, err := svc.State().Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return at(c.Processors["edge1"])
	}
	var last time.Time
	for _, id := range normal {
		if a := of(id); a.After(last) {
			last = a
		}
	}
	for _, id := range urgent {
		if a := of(id); !a.Before(last) {
			t.Errorf("urgent event %s %s at %s, not before the backlog's last at %s", id, what, a.Format(time.StampMicro), last.Format(time.StampMicro))
		}
	}
}

// waitHolds waits, within the given time, until stream at site holds at
// least n messages.
func waitHolds(t *testing.T, ls *System, site, stream string, n int, within time.Duration) {
	t.Helper()
	js := jstest.ConnectURL(t, ls.App(site).ClientURL())
	check.For(t, within, 20*time.Millisecond, func() error {
		s, err := js.Stream(context.Background(), stream)
		if err != nil {
			return err
		}
		if got := s.CachedInfo().State.Msgs; got < uint64(n) {
			return fmt.Errorf("%s at %s holds %d of %d", stream, site, got, n)
		}
		return nil
	})
}
