package systest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
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

// copyDir copies a stopped box's data dir to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v: %s", src, err, out)
	}
}

// restoreFrom replaces a data dir with a copy taken earlier: a box rolled back.
func restoreFrom(t *testing.T, copy string) func(string) {
	return func(dir string) {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		copyDir(t, copy, dir)
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
// published after it is back completes at L1.
func TestFleet_RolledBack(t *testing.T) {
	for _, site := range []string{"edge1", "hub"} {
		t.Run(site, func(t *testing.T) {
			ls := relayFleet(t)
			js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
			waitDone(t, ls, publishN(t, js, "first", 100), time.Minute, "edge1", "edge2")
			copy := t.TempDir() + "/copy"
			restart(t, ls, site, func(dir string) { copyDir(t, dir, copy) })
			waitDone(t, ls, publishN(t, js, "second", 300), time.Minute, "edge1", "edge2")
			restart(t, ls, site, restoreFrom(t, copy))
			waitDone(t, ls, publishN(t, js, "third", 200), time.Minute, "edge1", "edge2")
		})
	}
}

// An edge parked while its hub's events stream fills: the hub releases the
// parked edge's oldest events past its backlog budget, so the stream
// never fills and the other edge completes every event; once the parked
// edge is back, L1 sends it the released events, to it alone, and it
// completes every event too, each once.
func TestFleet_ParkedEdge(t *testing.T) {
	const streamBytes = 16 << 20
	ls := testSystem(t, Options{Edges: 2, Configure: func(c *topology.Config) {
		withTransport(topology.TransportRelay, "")(c)
		// L1 sends an event again once the origin stream would not take
		// the copy for a duplicate.
		c.Topology.Events.DuplicateWindow = topology.Duration(time.Second)
		if c.Site == "hub" {
			c.JetStream.MaxStreamBytes = streamBytes
		}
	}}, nil)
	if err := ls.Stop("edge2"); err != nil {
		t.Fatal(err)
	}
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	// 2.5 times the hub's stream limit.
	ids := publishData(t, js, "parked", 5*streamBytes/2/8192, make([]byte, 8192))
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
