package topology

import (
	"strings"
	"testing"
)

func TestTopology_Transport_Bad(t *testing.T) {
	tests := []topologyCase{
		{"unknown default", func(tp *Topology) { tp.Transport = "push" }, "transport", `"push" is not one of relay, sourcing`},
		{"unknown on a link", func(tp *Topology) { tp.Sites[2].Transport = "Relay" }, "sites[2].transport", `"Relay" is not one of relay, sourcing`},
		{"on l1", func(tp *Topology) { tp.Sites[0].Transport = TransportRelay }, "sites[0].transport", "an l1 site has no upstream link"},
		{"unknown server", func(tp *Topology) { tp.Sites[1].Server = "nats" }, "sites[1].server", `"nats" is not one of leafline, nats-server`},
		{"relay to a nats-server site", func(tp *Topology) {
			tp.Sites[1].Server = ServerNATS
			tp.Sites[2].Transport = TransportRelay
		}, "sites[2].transport", "its upstream hub runs nats-server (sites[].server), which cannot run the relay"},
		{"relay from a nats-server site", func(tp *Topology) {
			tp.Transport = TransportRelay
			tp.Sites[1].Server = ServerNATS
		}, "transport", "relay on site hub's link, but hub runs nats-server"},
	}
	wantTopologyProblems(t, tests)
}

func TestTopology_LinkTransport(t *testing.T) {
	raw := func(tp *Topology) []byte { return mustMarshal(t, tp) }
	tp := exampleTopology(t)
	tp.Transport = TransportRelay
	tp.Sites[2].Transport = TransportSourcing
	got, err := ParseTopology(raw(tp), "topology.json")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{tp.Sites[0].Name: "", tp.Sites[1].Name: TransportRelay, tp.Sites[2].Name: TransportSourcing}
	for name, w := range want {
		s, _ := got.Site(name)
		if g := got.LinkTransport(s); g != w {
			t.Errorf("site %s: transport %q, want %q", name, g, w)
		}
	}
	// Without either setting a link between leafline boxes uses the
	// relay, and one with a stock nats-server end sourcing.
	plain, err := ParseTopology(raw(exampleTopology(t)), "topology.json")
	if err != nil {
		t.Fatal(err)
	}
	if g := plain.LinkTransport(&plain.Sites[1]); g != TransportRelay {
		t.Errorf("default transport %q, want %q", g, TransportRelay)
	}
	stock := exampleTopology(t)
	stock.Sites[1].Server = ServerNATS
	mixed, err := ParseTopology(raw(stock), "topology.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		if g := mixed.LinkTransport(&mixed.Sites[i]); g != TransportSourcing {
			t.Errorf("site %s, with nats-server at hub: transport %q, want sourcing", mixed.Sites[i].Name, g)
		}
	}
	// The strict decoder refuses a misspelt key beside it.
	bad := strings.Replace(string(raw(tp)), `"transport"`, `"transprot"`, 1)
	if _, err := ParseTopology([]byte(bad), "topology.json"); err == nil || !strings.Contains(err.Error(), "transprot") {
		t.Errorf("misspelt key: %v", err)
	}
}
