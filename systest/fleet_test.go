package systest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology"
)

// waitDone waits until every event of ids is complete at L1 for each
// processor, and fails naming the first that is not.
func waitDone(t *testing.T, ls *System, ids []string, within time.Duration, processors ...string) {
	t.Helper()
	svc := leafline.Completions(ls.App("l1"))
	check.For(t, within, 100*time.Millisecond, func() error {
		ctx := context.Background()
		for _, id := range ids {
			c, err := svc.State().Get(ctx, id)
			if err != nil {
				return fmt.Errorf("event %q: %w; %s", id, err, pathState(ls))
			}
			for _, p := range processors {
				if pr, ok := c.Processors[p]; !ok || pr.Status != receipt.StatusProcessed {
					return fmt.Errorf("event %q not complete for %s (%d events); %s", id, p, len(ids), pathState(ls))
				}
			}
		}
		return nil
	})
}

// restart stops the named box, runs change on its data dir, and starts it again.
func restart(t *testing.T, ls *System, name string, change func(dir string)) {
	t.Helper()
	if err := ls.Stop(name); err != nil {
		t.Fatal(err)
	}
	change(ls.Configs[name].DataDir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ls.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
}

// wipe deletes a data dir: a box replaced with a blank disk.
func wipe(t *testing.T) func(string) {
	return func(dir string) {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}

func relayFleet(t *testing.T) *System {
	return testSystem(t, Options{Edges: 2, Configure: withTransport(topology.TransportRelay, "")}, nil)
}

// A box replaced with a blank disk under its old name: every event
// published afterwards completes at L1, at every hop whose upstream is
// the new box's streams.
func TestFleet_Replaced(t *testing.T) {
	for _, c := range []struct{ site, transport string }{
		{"edge1", topology.TransportRelay}, {"hub", topology.TransportRelay},
	} {
		t.Run(c.site+" "+c.transport, func(t *testing.T) {
			ls := testSystem(t, Options{Edges: 2, Configure: withTransport(c.transport, "")}, nil)
			site := c.site
			js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
			waitDone(t, ls, publishN(t, js, "before", 200), time.Minute, "edge1", "edge2")
			restart(t, ls, site, wipe(t))
			after := publishN(t, js, "after", 200)
			waitDone(t, ls, after, time.Minute, "edge1", "edge2")
		})
	}
}

// A box rolled back to a copy of its data dir taken earlier: every event
// published after it is back completes at L1. For L1 itself (restored
// from a backup), the events published between the copy and the restore
// are gone with its origin stream; what is published after completes.
func TestFleet_RolledBack(t *testing.T) {
	for _, site := range []string{"edge1", "hub", "l1"} {
		t.Run(site, func(t *testing.T) {
			ls := relayFleet(t)
			l1 := func() jetstream.JetStream { return jstest.ConnectURL(t, ls.App("l1").ClientURL()) }
			waitDone(t, ls, publishN(t, l1(), "first", 100), time.Minute, "edge1", "edge2")
			// The copy is a backup (leafline backup), the rollback its
			// restore into a blank data dir (leafline restore).
			var archive bytes.Buffer
			restart(t, ls, site, func(string) {
				if _, err := box.Backup(ls.Configs[site], &archive); err != nil {
					t.Fatal(err)
				}
			})
			waitDone(t, ls, publishN(t, l1(), "second", 300), time.Minute, "edge1", "edge2")
			restart(t, ls, site, func(dir string) {
				wipe(t)(dir)
				if _, err := box.Restore(ls.Configs[site], &archive); err != nil {
					t.Fatal(err)
				}
			})
			waitDone(t, ls, publishN(t, l1(), "third", 200), time.Minute, "edge1", "edge2")
		})
	}
}

// An edge parked while its hub's events stream fills: the hub releases the
// parked edge's oldest events past its backlog budget, so the stream
// never fills and the other edge completes every event; once the parked
// edge is back, L1 sends it the released events, to it alone, and it
// completes every event too, each once.
func TestFleet_ParkedEdge(t *testing.T) {
	const (
		streamBytes  = 4 << 20
		parkedWindow = 20 * time.Second
	)
	ls := testSystem(t, Options{Edges: 2, Configure: func(c *topology.Config) {
		withTransport(topology.TransportRelay, "")(c)
		// L1 sends an event again once the origin stream would not take
		// the copy for a duplicate. The parked edge is back well within
		// this window: L1's first rounds find every released event too
		// young, and it must go on once they are not.
		c.Topology.Events.DuplicateWindow = topology.Duration(parkedWindow)
		if c.Site == "hub" {
			c.JetStream.MaxStreamBytes = streamBytes
		}
	}}, nil)
	if err := ls.Stop("edge2"); err != nil {
		t.Fatal(err)
	}
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	// 1.5 times the hub's stream limit (the bench takes 2.5 times 64 MiB).
	ids := publishData(t, js, "parked", 3*streamBytes/2/8192, make([]byte, 8192))
	waitDone(t, ls, ids, 2*time.Minute, "edge1")
	hub := ls.App("hub")
	if n := metricOf(t, hub, "leafline_edge_backlog_released_messages_total", map[string]string{"edge": "edge2"}); n == 0 {
		t.Fatal("the hub released nothing of the parked edge")
	}
	if n := metricOf(t, hub, "leafline_edge_backlog_released_messages_total", map[string]string{"edge": "edge1"}); n != 0 {
		t.Fatalf("the hub released %v messages of the edge that kept up", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ls.Start(ctx, "edge2"); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, ls, ids, "edge1", "edge2")
	if n := metricOf(t, ls.App("l1"), "leafline_completion_resent_total", map[string]string{"edge": "edge2"}); n == 0 {
		t.Fatal("L1 sent nothing again to the edge its hub released")
	}
	if n := metricOf(t, ls.App("l1"), "leafline_completion_resent_total", map[string]string{"edge": "edge1"}); n != 0 {
		t.Fatalf("L1 sent %v events again to the edge that kept up", n)
	}
}

// withSites returns a copy of ls's config of box with a topology
// changed by change (a clone of the system's).
func withSites(t *testing.T, ls *System, box string, change func(*topology.Topology)) *topology.Config {
	t.Helper()
	c := *ls.Configs[box]
	c.Topology = cloneTopology(t, ls.Topology)
	change(c.Topology)
	return &c
}

// withoutSite drops the named site from a topology.
func withoutSite(name string) func(*topology.Topology) {
	return func(tp *topology.Topology) {
		tp.Sites = slices.DeleteFunc(tp.Sites, func(s topology.Site) bool { return s.Name == name })
	}
}

// leafID is the id of the hub's leafnode connection from site (0: none).
func leafID(t *testing.T, ls *System, site string) uint64 {
	t.Helper()
	lz, err := ls.App("hub").Server().Leafz(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lz.Leafs {
		if l.Name == site {
			return l.ID
		}
	}
	return 0
}

// reloadBox makes the running box take cfg.
func reloadBox(t *testing.T, ls *System, name string, cfg *topology.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ls.App(name).Reload(ctx, cfg); err != nil {
		t.Fatalf("reload %s: %v", name, err)
	}
	ls.Configs[name] = cfg
}

// An edge added to the topology of a running fleet: L1 and its hub take
// the new topology without a restart, the hub's other edge keeps its
// link, the new edge takes its first event within seconds of being
// ready, and L1 expects it for every event published afterwards.
func TestFleet_SiteAdded(t *testing.T) {
	ls, err := NewWith(t.TempDir(), Options{Edges: 2, Logger: testLogger(t), Configure: withTransport(topology.TransportRelay, "")},
		func(string) leafline.Options { return leafline.Options{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	full := map[string]*topology.Config{}
	for _, name := range []string{"l1", "hub", "edge1"} {
		full[name] = ls.Configs[name]
		ls.Configs[name] = withSites(t, ls, name, withoutSite("edge2"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{"l1", "hub", "edge1"} {
		if _, err := ls.Start(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	waitDone(t, ls, publishN(t, js, "before", 100), time.Minute, "edge1")
	link := leafID(t, ls, "edge1")
	reloadBox(t, ls, "l1", full["l1"])
	reloadBox(t, ls, "hub", full["hub"])
	if _, err := ls.Start(ctx, "edge2"); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	after := publishN(t, js, "after", 100)
	waitDone(t, ls, after[:1], time.Minute, "edge2")
	t.Logf("edge2 completed its first event %s after its ready", time.Since(ready).Round(time.Millisecond))
	waitDone(t, ls, after, time.Minute, "edge1", "edge2")
	if now := leafID(t, ls, "edge1"); now != link {
		t.Fatalf("edge1's link to the hub dropped during the reload (connection %d, now %d)", link, now)
	}
}

// An edge retired from a running fleet: within seconds L1 closes every
// event still pending for it with the status retired, its hub deletes
// its consumers, and L1 no longer expects it for new events.
func TestFleet_SiteRetired(t *testing.T) {
	ls := relayFleet(t)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	if err := ls.Stop("edge2"); err != nil {
		t.Fatal(err)
	}
	held := publishN(t, js, "held", 100)
	waitDone(t, ls, held, time.Minute, "edge1")
	retire := func(tp *topology.Topology) {
		s, _ := tp.Site("edge2")
		s.Retired = true
	}
	link := leafID(t, ls, "edge1")
	reloadBox(t, ls, "l1", withSites(t, ls, "l1", retire))
	reloadBox(t, ls, "hub", withSites(t, ls, "hub", retire))
	svc := leafline.Completions(ls.App("l1"))
	check.For(t, time.Minute, 100*time.Millisecond, func() error {
		for _, id := range held {
			c, err := svc.State().Get(context.Background(), id)
			if err != nil {
				return err
			}
			if c.Status != record.EventRetired || c.Processors["edge2"].Status != record.StatusRetired {
				return fmt.Errorf("event %q: %s, edge2 %+v", id, c.Status, c.Processors["edge2"])
			}
		}
		return nil
	})
	hjs := jstest.ConnectURL(t, ls.App("hub").ClientURL())
	if _, err := hjs.Consumer(context.Background(), "HA", topology.RelayConsumerName("edge2")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the hub still holds edge2's consumer: %v", err)
	}
	after := publishN(t, js, "after", 50)
	waitDone(t, ls, after, time.Minute, "edge1")
	c, err := svc.State().Get(context.Background(), after[0])
	if err != nil || c.Status != record.EventComplete || slices.Contains(c.Expected, "edge2") {
		t.Fatalf("an event published after the retirement: %+v, %v", c, err)
	}
	if now := leafID(t, ls, "edge1"); now != link {
		t.Fatalf("edge1's link to the hub dropped during the reload (connection %d, now %d)", link, now)
	}
}

// A reload that changes what a box's own server runs with (here a local
// setting) starts the box again inside its process on the new config; a
// reload that would move its data dir is refused, and the box runs on.
func TestFleet_ReloadRestartsOrRefuses(t *testing.T) {
	ls := relayFleet(t)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	c := *ls.Configs["edge1"]
	c.Delivery.BatchSize = 7
	reloadBox(t, ls, "edge1", &c)
	waitDone(t, ls, publishN(t, js, "after", 50), time.Minute, "edge1", "edge2")
	bad := c
	bad.DataDir += "-elsewhere"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ls.App("edge1").Reload(ctx, &bad); err == nil || !strings.Contains(err.Error(), "data_dir changes") {
		t.Fatalf("a reload moving the data dir: %v", err)
	}
	waitDone(t, ls, publishN(t, js, "still", 50), time.Minute, "edge1", "edge2")
}

// A hub replaced with a blank disk while an edge is away: the new hub
// takes L1's stream after what the old one had taken (not from its start),
// and releases its edges through there, so L1 sends the away edge the
// events the old hub held for it, and every event completes once.
func TestFleet_HubReplacedWhileAnEdgeIsAway(t *testing.T) {
	ls := testSystem(t, Options{Edges: 2, Configure: func(c *topology.Config) {
		withTransport(topology.TransportRelay, "")(c)
		c.Topology.Events.DuplicateWindow = topology.Duration(time.Second)
	}}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	waitDone(t, ls, publishN(t, js, "first", 100), time.Minute, "edge1", "edge2")
	if err := ls.Stop("edge2"); err != nil {
		t.Fatal(err)
	}
	held := publishN(t, js, "held", 200)
	waitDone(t, ls, held, time.Minute, "edge1")
	restart(t, ls, "hub", wipe(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ls.Start(ctx, "edge2"); err != nil {
		t.Fatal(err)
	}
	after := publishN(t, js, "after", 100)
	waitDone(t, ls, slices.Concat(held, after), time.Minute, "edge1", "edge2")
	if got, want := leafline.Completions(ls.App("l1")).Stats().Applied, uint64(2*(100+200+100)); got != want {
		t.Fatalf("L1 applied %d receipts for %d (event, edge) pairs", got, want)
	}
	if n := metricOf(t, ls.App("hub"), "leafline_link_upstream_changes_total", map[string]string{"kind": "new_downstream"}); n != 1 {
		t.Fatalf("the new hub's link to L1 reported %v new downstreams, want 1", n)
	}
	// The new HA took the events published after it and the 200 sent
	// again to edge2, not L1's whole stream again (400).
	hjs := jstest.ConnectURL(t, ls.App("hub").ClientURL())
	if last := localsys.StreamState(context.Background(), hjs, "HA").LastSeq; last > 300 {
		t.Fatalf("the new hub's events stream took %d messages: it replayed what the old hub had taken", last)
	}
}

// An edge moved to another hub while it is away (a truck driven to
// another region): L1 and both hubs take the new topology by a reload,
// the edge starts on it, and the new hub's other edge keeps its link.
// The events its old hub still held for it reach it through L1's redrive
// by its new hub, every event published afterwards takes the new path,
// and the old hub holds nothing more for it.
func TestFleet_SiteMoved(t *testing.T) {
	ls := testSystem(t, Options{Edges: 2, Hubs: 2, Configure: func(c *topology.Config) {
		withTransport(topology.TransportRelay, "")(c)
		c.Topology.Events.DuplicateWindow = topology.Duration(time.Second)
		c.Topology.Receipts.DuplicateWindow = topology.Duration(time.Second)
		c.Completion.OverdueAfter = topology.Duration(time.Second)
		c.Completion.RedriveAfter = topology.Duration(3 * time.Second)
	}}, nil)
	if s, _ := ls.Topology.Site("edge2"); s.Upstream != "hub2" {
		t.Fatalf("edge2's upstream is %q, want hub2", s.Upstream)
	}
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	waitDone(t, ls, publishN(t, js, "before", 100), time.Minute, "edge1", "edge2")
	if err := ls.Stop("edge2"); err != nil {
		t.Fatal(err)
	}
	held := publishN(t, js, "held", 100)
	waitDone(t, ls, held, time.Minute, "edge1")
	// Long after, the new hub holds none of them: edge1 took them.
	waitHATrimmed(t, ls, "hub")

	move := func(tp *topology.Topology) {
		s, _ := tp.Site("edge2")
		s.Upstream = "hub"
	}
	link := leafID(t, ls, "edge1")
	reloadBox(t, ls, "l1", withSites(t, ls, "l1", move))
	reloadBox(t, ls, "hub", withSites(t, ls, "hub", move))
	c := withSites(t, ls, "edge2", move)
	hub, _ := c.Topology.Site("hub")
	c.Leafnode.UpstreamURL = "nats-leaf://" + hub.Leafnode.Listen
	ls.Configs["edge2"] = c
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ls.Start(ctx, "edge2"); err != nil {
		t.Fatal(err)
	}
	reloadBox(t, ls, "hub2", withSites(t, ls, "hub2", move))

	after := publishN(t, js, "after", 100)
	waitDone(t, ls, slices.Concat(held, after), 2*time.Minute, "edge1", "edge2")
	if now := leafID(t, ls, "edge1"); now != link {
		t.Fatalf("edge1's link to the hub dropped during the move (connection %d, now %d)", link, now)
	}
	hjs := jstest.ConnectURL(t, ls.App("hub2").ClientURL())
	if _, err := hjs.Consumer(context.Background(), "HA", topology.RelayConsumerName("edge2")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the old hub still holds edge2's consumer: %v", err)
	}
	// The old hub, left without an edge, keeps none of the events it
	// still takes from L1.
	waitHATrimmed(t, ls, "hub2")
}

// waitHATrimmed waits until the hub's events stream holds at most its
// last event (which the trim keeps: its link's mark).
func waitHATrimmed(t *testing.T, ls *System, hub string) {
	t.Helper()
	js := jstest.ConnectURL(t, ls.App(hub).ClientURL())
	check.For(t, time.Minute, 100*time.Millisecond, func() error {
		if st := localsys.StreamState(context.Background(), js, "HA"); st.Msgs > 1 {
			return fmt.Errorf("%s's HA still holds %d events", hub, st.Msgs)
		}
		return nil
	})
}
