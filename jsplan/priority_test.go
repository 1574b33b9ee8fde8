package jsplan

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
)

// classConfigs lays out l1, a hub and two edges (edge1 filtered to
// events.a.>) with the class urgent, and each site's box config.
func classConfigs(t *testing.T) map[string]*topology.Config {
	t.Helper()
	tp := &topology.Topology{
		Events: topology.Events{Subjects: []string{"events.>"}, Priorities: []topology.Priority{{Name: "urgent", Subjects: []string{"events.*.urgent"}}}},
		Sites: []topology.Site{
			{Name: "l1", Role: topology.RoleL1}, {Name: "hub", Role: topology.RoleHub, Upstream: "l1"},
			{Name: "edge1", Role: topology.RoleEdge, Upstream: "hub", Filter: "events.a.>"},
			{Name: "edge2", Role: topology.RoleEdge, Upstream: "hub"},
		}}
	tp.SetDefaults()
	out := map[string]*topology.Config{}
	for _, s := range tp.Sites {
		c := &topology.Config{Site: s.Name, Topology: tp}
		c.SetDefaults()
		out[s.Name] = c
	}
	return out
}

// The hub serves each edge a relay consumer for the class, narrowed to
// the edge's filter and started after the edge's own link; it trims HA
// by both.
func TestSitePlan_HubServesEachEdgeItsClass(t *testing.T) {
	cfg := classConfigs(t)["hub"]
	hub, _ := cfg.Topology.Site("hub")
	var got []ConsumerPlan
	for _, c := range SitePlan(cfg, hub).Consumers {
		if c.Stream == "HA" {
			got = append(got, c)
		}
	}
	want := map[string]string{"leafline-relay-edge1-urgent": "events.a.urgent", "leafline-relay-edge2-urgent": "events.*.urgent"}
	for name, filter := range want {
		i := slices.IndexFunc(got, func(c ConsumerPlan) bool { return c.Config.Durable == name })
		if i < 0 {
			t.Fatalf("no consumer %s on HA among %+v", name, got)
		}
		c := got[i]
		edge := name[len("leafline-relay-") : len(name)-len("-urgent")]
		if c.Config.FilterSubject != filter || c.StartAfter != topology.RelayConsumerName(edge) || c.Replaces != "" || c.Config.MaxAckPending != RelayBatch {
			t.Errorf("consumer %s: %+v", name, c)
		}
	}
	for _, p := range TrimPlans(cfg, hub) {
		if p.Stream == "HA" && !slices.Contains(p.Consumers, "leafline-relay-edge1-urgent") {
			t.Errorf("HA is trimmed by %v, without the class's consumer", p.Consumers)
		}
	}
}

// The edge stores the class in a stream of its own, filled by a link of
// its own, with the runner's consumer on it; its other link skips the
// class's events.
func TestSitePlan_EdgeTakesItsClassByItsOwnLink(t *testing.T) {
	cfg := classConfigs(t)["edge1"]
	edge, _ := cfg.Topology.Site("edge1")
	pl := SitePlan(cfg, edge)
	i := slices.IndexFunc(pl.Streams, func(s jetstream.StreamConfig) bool { return s.Name == "L2A_URGENT" })
	if i < 0 || !pl.Streams[i].AllowAtomicPublish || len(pl.Streams[i].Sources) != 0 {
		t.Fatalf("streams %+v: want L2A_URGENT, filled by the relay", pl.Streams)
	}
	if !slices.ContainsFunc(pl.Consumers, func(c ConsumerPlan) bool {
		return c.Stream == "L2A_URGENT" && c.Config.Durable == cfg.Delivery.Consumer
	}) {
		t.Errorf("no runner consumer on L2A_URGENT among %+v", pl.Consumers)
	}
	links := RelayLinks(cfg, edge)
	if len(links) != 2 {
		t.Fatalf("links %+v: want the normal one and the class's", links)
	}
	normal, urgent := links[0], links[1]
	if urgent.LocalStream != "L2A_URGENT" || urgent.Consumer != "leafline-relay-edge1-urgent" || urgent.Rank != 0 ||
		urgent.LinkName(edge) != "hub-HA-edge1-urgent" || urgent.ClassOf != nil {
		t.Errorf("class link %+v", urgent)
	}
	if normal.LocalStream != "L2A" || normal.Rank != 1 || normal.ClassOf == nil || normal.ClassOf("events.a.urgent") != "urgent" || normal.ClassOf("events.a.x") != "normal" {
		t.Errorf("normal link %+v", normal)
	}
	if !slices.ContainsFunc(TrimPlans(cfg, edge), func(p TrimPlan) bool {
		return p.Stream == "L2A_URGENT" && slices.Equal(p.Consumers, []string{cfg.Delivery.Consumer}) && slices.ContainsFunc(p.Keep, func(k KeepLink) bool { return slices.Equal(k.Marks, []string{">"}) })
	}) {
		t.Errorf("trim plans %+v: want L2A_URGENT trimmed by the runner, its link's mark kept", TrimPlans(cfg, edge))
	}
}

// The receipts of a class travel in a lane of their own: each receipts
// stream on the way serves the next hop a consumer of the lane, which
// that hop's link of the lane takes into the same stream, and which
// bounds the stream's trim.
func TestSitePlan_ReceiptLanes(t *testing.T) {
	cfgs := classConfigs(t)
	tp := cfgs["l1"].Topology
	lane := func(site, stream string, filter string) {
		t.Helper()
		cfg := cfgs[site]
		s, _ := tp.Site(site)
		up, _ := tp.Site(s.Upstream)
		name := topology.RelayClassConsumerName(up.Name, "urgent")
		i := slices.IndexFunc(SitePlan(cfg, s).Consumers, func(c ConsumerPlan) bool { return c.Stream == stream && c.Config.Durable == name })
		if i < 0 {
			t.Fatalf("%s serves no consumer %s on %s", site, name, stream)
		}
		c := SitePlan(cfg, s).Consumers[i]
		if c.Config.FilterSubject != filter || c.StartAfter != topology.RelayConsumerName(up.Name) {
			t.Errorf("%s's consumer %s: %+v", site, name, c)
		}
		if !slices.ContainsFunc(TrimPlans(cfg, s), func(p TrimPlan) bool { return p.Stream == stream && slices.Contains(p.Consumers, name) }) {
			t.Errorf("%s trims %s without %s", site, stream, name)
		}
	}
	lane("edge1", "RE", "leafline.receipts.edge1.*.urgent")
	lane("hub", "RH", "leafline.receipts.*.*.urgent")

	links := func(site string) []TakenLink {
		s, _ := tp.Site(site)
		var out []TakenLink
		for _, l := range RelayLinks(cfgs[site], s) {
			if l.LocalStream == "RH" || l.LocalStream == "R1" {
				out = append(out, l)
			}
		}
		return out
	}
	hub := links("hub")
	if len(hub) != 4 {
		t.Fatalf("hub's receipt links %+v: want a normal and an urgent one per edge", hub)
	}
	normal, urgent := hub[0], hub[1]
	if normal.Class != "" || normal.Rank != 1 || !slices.Equal(normal.Marks, []string{"leafline.receipts.edge1.*"}) ||
		normal.ClassOf("leafline.receipts.edge1.processed.urgent") != "urgent" || normal.ClassOf("leafline.receipts.edge1.processed") != "" {
		t.Errorf("normal receipt link %+v", normal)
	}
	if urgent.Class != "urgent" || urgent.Rank != 0 || urgent.Consumer != "leafline-relay-hub-urgent" ||
		!slices.Equal(urgent.Marks, []string{"leafline.receipts.edge1.*.urgent"}) || urgent.Stream != "RE" {
		t.Errorf("urgent receipt link %+v", urgent)
	}
	l1 := links("l1")
	if len(l1) != 2 || l1[1].Consumer != "leafline-relay-l1-urgent" ||
		!slices.Equal(l1[1].Marks, []string{"leafline.receipts.edge1.*.urgent", "leafline.receipts.edge2.*.urgent"}) ||
		!slices.Equal(l1[0].Marks, []string{"leafline.receipts.edge1.*", "leafline.receipts.edge2.*"}) {
		t.Errorf("l1's receipt links %+v", l1)
	}
	l1Site, _ := tp.Site("l1")
	if p := TrimPlans(cfgs["l1"], l1Site); !slices.Contains(p[0].Consumers, "leafline-completion-urgent") {
		t.Errorf("l1 trims R1 by %v, without the lane's consumer", p[0].Consumers)
	}
}
