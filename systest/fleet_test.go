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
