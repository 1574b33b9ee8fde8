package topology

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// An edge's backlog bounds: its own, else the topology's, else three
// quarters of the hub's stream limit and a week; a bad size or a bound
// on a site that is not an edge is refused with its path; a hub whose
// stream limit does not exceed an edge's budget is warned.
func TestTopology_SiteBacklog(t *testing.T) {
	tp := &Topology{Sites: []Site{{Name: "l1", Role: RoleL1}, {Name: "hub", Role: RoleHub, Upstream: "l1"},
		{Name: "e1", Role: RoleEdge, Upstream: "hub"}, {Name: "e2", Role: RoleEdge, Upstream: "hub", Backlog: Backlog{MaxBytes: "1MiB", MaxAge: Duration(time.Hour)}}}}
	e1, _ := tp.Site("e1")
	if b, a := tp.SiteBacklog(e1, 64<<20); b != 48<<20 || a != DefaultBacklogMaxAge {
		t.Fatalf("defaults: %d %s", b, a)
	}
	tp.Backlog = Backlog{MaxBytes: "8MB"}
	e2, _ := tp.Site("e2")
	if b, _ := tp.SiteBacklog(e1, 64<<20); b != 8_000_000 {
		t.Fatalf("the topology's: %d", b)
	}
	if b, a := tp.SiteBacklog(e2, 64<<20); b != 1<<20 || a != time.Hour {
		t.Fatalf("the site's own: %d %s", b, a)
	}
	p := &problems{}
	tp.Sites[1].Backlog = Backlog{MaxBytes: "2Mb"}
	tp.Sites[2].Backlog = Backlog{MaxAge: Duration(time.Second)}
	tp.validateBacklog(p)
	got := fmt.Sprint(p.err("t"))
	for _, want := range []string{"sites[1].backlog: site hub: only an edge", "sites[2].backlog.max_age: 1s is below 1m"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
}

// A hub whose stream limit does not exceed an edge's backlog budget is
// warned: that edge, away, could fill the stream.
func TestLint_BacklogAboveTheHubsStream(t *testing.T) {
	tp := &Topology{Sites: []Site{{Name: "l1", Role: RoleL1}, {Name: "hub", Role: RoleHub, Upstream: "l1"},
		{Name: "e1", Role: RoleEdge, Upstream: "hub", Backlog: Backlog{MaxBytes: "100MiB"}}, {Name: "e2", Role: RoleEdge, Upstream: "hub"}}}
	c := &Config{Site: "hub", Topology: tp, JetStream: JetStreamConfig{SyncInterval: "always", MaxStreamBytes: 64 << 20}}
	var hits []string
	for _, w := range Lint(c) {
		if strings.Contains(w.Msg, "backlog budget") {
			hits = append(hits, w.Msg)
		}
	}
	if len(hits) != 1 || !strings.Contains(hits[0], "edge e1's backlog budget") {
		t.Fatalf("warnings about budgets: %q", hits)
	}
}
