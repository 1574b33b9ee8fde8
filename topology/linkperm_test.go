package topology_test

// The tests of package linkperm, which need this package's test topologies
// (export_test.go).

import (
	"slices"
	"strings"
	"testing"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/linkperm"
)

func TestLinkPermissions_Sourcing(t *testing.T) {
	tp := topology.SecureTopology(t)
	tp.Transport = topology.TransportSourcing
	tp.SetDefaults()
	got, err := linkperm.Of(tp, "edge1")
	if err != nil {
		t.Fatal(err)
	}
	want := linkperm.Permissions{
		Publish: []string{
			"$JS.hub.API.CONSUMER.RESET.HA.leafline-src-edge1",
			"$JS.FC.hub.*.HA.leafline-src-edge1.*",
			"$JS.FC.HA.leafline-src-edge1.*",
			"leafline.src.edge1.RE.hub",
			"$JSC.R.edge1.*.RE.leafline-src-hub.*",
		},
		Subscribe: []string{
			"leafline.src.hub.HA.edge1",
			"$JS.edge1.API.CONSUMER.RESET.RE.leafline-src-hub",
			"$JS.FC.edge1.*.RE.leafline-src-hub.*",
			"$JSC.R.hub.*.HA.leafline-src-edge1.*",
		},
	}
	if !slices.Equal(got.Publish, want.Publish) || !slices.Equal(got.Subscribe, want.Subscribe) {
		t.Fatalf("got %+v", got)
	}
	hub, err := linkperm.Of(tp, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if hub.Publish[0] != "$JS.l1.API.CONSUMER.RESET.L1A.leafline-src-hub" || hub.Subscribe[0] != "leafline.src.l1.L1A.hub" || hub.Publish[3] != "leafline.src.hub.RH.l1" {
		t.Fatalf("hub: %+v", hub)
	}
	// No receipt subject crosses a link: receipts travel inside sourcing.
	for _, s := range append(got.Publish, got.Subscribe...) {
		if strings.HasPrefix(s, tp.Receipts.SubjectPrefix) || strings.Contains(s, "$JS.API") || strings.Contains(s, "STREAM") {
			t.Fatalf("%q is allowed across the link", s)
		}
	}
	for _, s := range []string{"l1", "nowhere"} {
		if _, err := linkperm.Of(tp, s); err == nil {
			t.Fatalf("%s: no error", s)
		}
	}
}

func TestDirect_LinkPermissions(t *testing.T) {
	tp := topology.DirectTopology(t)
	tp.Transport = topology.TransportSourcing // the receipts' link, by sourcing
	direct := linkperm.Permissions{
		Publish: []string{
			"$JS.l1.API.CONSUMER.INFO.L1A.leafline-sink-edge1",
			"$JS.l1.API.CONSUMER.MSG.NEXT.L1A.leafline-sink-edge1",
			"$JS.ACK.l1.*.L1A.leafline-sink-edge1.>",
		},
		Subscribe: []string{"leafline.direct.edge1.>"},
	}
	if got, err := linkperm.Direct(tp, "edge1"); err != nil || !equalPerms(got, direct) {
		t.Fatalf("Direct = %+v, %v", got, err)
	}
	// edge1 → hub: its receipts source, and its consumer on L1 instead of
	// the forward source.
	got, err := linkperm.Of(tp, "edge1")
	if err != nil {
		t.Fatal(err)
	}
	want := linkperm.Permissions{
		Publish: append([]string{
			"leafline.src.edge1.RE.hub",
			"$JSC.R.edge1.*.RE.leafline-src-hub.*",
		}, direct.Publish...),
		Subscribe: append([]string{
			"$JS.edge1.API.CONSUMER.RESET.RE.leafline-src-hub",
			"$JS.FC.edge1.*.RE.leafline-src-hub.*",
		}, direct.Subscribe...),
	}
	if !equalPerms(got, want) {
		t.Fatalf("edge1:\n got %+v\nwant %+v", got, want)
	}
	for _, s := range append(got.Publish, got.Subscribe...) {
		if strings.Contains(s, "HA") || strings.Contains(s, "DELETE") || strings.Contains(s, "CREATE") || strings.Contains(s, "STREAM") || strings.Contains(s, "edge2") {
			t.Fatalf("edge1's direct link allows %q", s)
		}
	}
	// edge2 stays sourced, exactly as before.
	e2, _ := linkperm.Of(tp, "edge2")
	if e2.Publish[0] != "$JS.hub.API.CONSUMER.RESET.HA.leafline-src-edge2" || len(e2.Publish) != 5 || len(e2.Subscribe) != 4 {
		t.Fatalf("edge2: %+v", e2)
	}
	// hub → l1: its own sources, plus edge1's consumer (not edge2's).
	hub, _ := linkperm.Of(tp, "hub")
	sourced := topology.SecureTopology(t)
	sourced.Transport = topology.TransportSourcing
	sourced.SetDefaults()
	hubBefore, _ := linkperm.Of(sourced, "hub")
	want = linkperm.Permissions{
		Publish:   append(slices.Clone(hubBefore.Publish), direct.Publish...),
		Subscribe: append(slices.Clone(hubBefore.Subscribe), direct.Subscribe...),
	}
	if !equalPerms(hub, want) {
		t.Fatalf("hub:\n got %+v\nwant %+v", hub, want)
	}
	// The filter is L1's to set: no subject of the edge's carries it.
	tp.Sites[2].Filter = ""
	if dp, _ := linkperm.Direct(tp, "edge1"); !equalPerms(dp, direct) {
		t.Fatalf("no filter: %+v", dp)
	}
	if _, err := linkperm.Direct(tp, "hub"); err == nil {
		t.Fatal("Direct of a hub: no error")
	}
}

// A relay link's permissions carry the relay's pull, reset, ACK and inbox
// subjects and none of sourcing's.
func TestLinkPermissions_Relay(t *testing.T) {
	tp := topology.ExampleTopology(t)
	tp.Transport = topology.TransportRelay
	got, err := topology.ParseTopology(topology.MustMarshal(t, tp), "topology.json")
	if err != nil {
		t.Fatal(err)
	}
	edge := got.Sites[2]
	hub, _ := got.Site(edge.Upstream)
	lp, err := linkperm.Of(got, edge.Name)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(append(lp.Publish, lp.Subscribe...), " ")
	for _, want := range []string{
		topology.APIPrefix(hub.Domain) + ".CONSUMER.MSG.NEXT." + got.Events.HubStream + "." + topology.RelayConsumerName(edge.Name),
		topology.APIPrefix(edge.Domain) + ".CONSUMER.MSG.NEXT." + got.Receipts.EdgeStream + "." + topology.RelayConsumerName(hub.Name),
		topology.APIPrefix(hub.Domain) + ".CONSUMER.RESET." + got.Events.HubStream + "." + topology.RelayConsumerName(edge.Name),
		topology.APIPrefix(edge.Domain) + ".CONSUMER.RESET." + got.Receipts.EdgeStream + "." + topology.RelayConsumerName(hub.Name),
		topology.RelayInboxPrefix(edge.Name) + ".>",
		topology.RelayInboxPrefix(hub.Name) + ".>",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("permissions lack %s: %v", want, lp)
		}
	}
	if strings.Contains(all, "leafline.src") || strings.Contains(all, "STREAM.MSG.GET") {
		t.Errorf("relay link permits sourcing or stream reads: %v", lp)
	}
}

// Over the relay, an edge that takes a class pulls it from the hub through
// the class's consumer, and the hub and L1 pull its receipts' lane
// through theirs.
func TestLinkPermissions_RelayClasses(t *testing.T) {
	tp := topology.ExampleTopology(t)
	tp.Transport = topology.TransportRelay
	tp.Events.Priorities = []topology.Priority{{Name: "urgent", Subjects: []string{"events.*.urgent"}}}
	got, err := topology.ParseTopology(topology.MustMarshal(t, tp), "topology.json")
	if err != nil {
		t.Fatal(err)
	}
	edge := &got.Sites[2]
	hub, _ := got.Site(edge.Upstream)
	l1, _ := got.Site(hub.Upstream)
	for site, want := range map[*topology.Site][]string{
		edge: {
			topology.APIPrefix(hub.Domain) + ".CONSUMER.MSG.NEXT." + got.Events.HubStream + "." + topology.RelayClassConsumerName(edge.Name, "urgent"),
			topology.APIPrefix(edge.Domain) + ".CONSUMER.MSG.NEXT." + got.Receipts.EdgeStream + "." + topology.RelayClassConsumerName(hub.Name, "urgent"),
		},
		hub: {topology.APIPrefix(hub.Domain) + ".CONSUMER.MSG.NEXT." + got.Receipts.HubStream + "." + topology.RelayClassConsumerName(l1.Name, "urgent")},
	} {
		lp, err := linkperm.Of(got, site.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !slices.Contains(append(lp.Publish, lp.Subscribe...), w) {
				t.Errorf("%s's link permissions lack %s", site.Name, w)
			}
		}
	}
}

func equalPerms(a, b linkperm.Permissions) bool {
	return slices.Equal(a.Publish, b.Publish) && slices.Equal(a.Subscribe, b.Subscribe)
}
