package systest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/hop"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// withTransport sets every link of a System to transport, or, with
// edge1 != "", only edge1's link to it and the rest to the other one.
func withTransport(transport, edge1 string) func(*topology.Config) {
	return func(c *topology.Config) {
		c.Topology.Transport = transport
		if s, ok := c.Topology.Site("edge1"); ok && edge1 != "" {
			s.Transport = edge1
		}
	}
}

// Every link by the relay: events reach both edges, receipts reach L1,
// each stored message carries the relay's mark, and the sourcing
// consumers do not exist.
func TestSystem_Relay_TwoEdges(t *testing.T) {
	ls := testSystem(t, Options{Edges: 2, Configure: withTransport(topology.TransportRelay, "")}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, js, "relay", 300)
	waitCompleted(t, ls, ids, "edge1", "edge2")
	ctx := context.Background()
	hjs := jstest.ConnectURL(t, ls.App("hub").ClientURL())
	s, err := hjs.Stream(ctx, "HA")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(hop.HeaderSeq) == "" || m.Header.Get("Nats-Msg-Id") == "" {
		t.Fatalf("HA's newest message lacks the relay mark or its id: %v", m.Header)
	}
	if _, err := s.Consumer(ctx, topology.SourceConsumerName("edge1")); err == nil {
		t.Fatal("the hub created a sourcing consumer on a relay link")
	}
}

// A capped link's relays, one at each end, get the cap, and each box
// exports it for the link it pulls from; an uncapped link has none. The
// events and receipts still all arrive.
func TestSystem_Relay_CappedLink(t *testing.T) {
	ls := testSystem(t, Options{Edges: 2, Configure: func(c *topology.Config) {
		withTransport(topology.TransportRelay, "")(c)
		if s, ok := c.Topology.Site("edge1"); ok {
			s.Bandwidth = "16KB/s"
		}
	}}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishData(t, js, "capped", 60, make([]byte, 256))
	waitCompleted(t, ls, ids, "edge1", "edge2")
	for _, c := range []struct {
		box, link string
		want      float64
	}{
		{"edge1", "hub", 16_000}, {"hub", "edge1", 16_000},
		{"edge2", "hub", 0}, {"hub", "edge2", 0}, {"hub", "l1", 0}, {"l1", "hub", 0},
	} {
		got := registryValue(t, ls.App(c.box).Metrics().Registry(), "leafline_link_bandwidth_cap_bytes_per_second",
			map[string]string{"link": c.link, "direction": "in"})
		if got != c.want {
			t.Errorf("%s's cap on its link to %s: %v bytes/s, want %v", c.box, c.link, got, c.want)
		}
	}
}

// stockSite marks the named site as a stock nats-server in a System's
// topology: its links default to sourcing.
func stockSite(name string) func(*topology.Config) {
	return func(c *topology.Config) {
		if s, ok := c.Topology.Site(name); ok {
			s.Server = topology.ServerNATS
		}
	}
}

// One edge by the relay, the other by sourcing, through a link cut of the
// jsplan.Relayed edge: everything completes.
func TestSystem_Relay_MixedLinkCut(t *testing.T) {
	ls := testSystem(t, Options{Edges: 2, Configure: withTransport(topology.TransportSourcing, topology.TransportRelay)}, nil)
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	edge := ls.App("edge1")
	first := publishN(t, l1js, "before", 200)
	ls.Links["edge1"].Cut()
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if edge.UpstreamConnected() {
			return errors.New("edge still connected")
		}
		return nil
	})
	second := publishN(t, l1js, "during", 200)
	ls.Links["edge1"].Restore()
	waitCompleted(t, ls, append(first, second...), "edge1", "edge2")
}

// A box of a stock server cannot take a stream by the relay.
func TestProvision_RefusesRelayOnStockServer(t *testing.T) {
	ls := testSystem(t, Options{Configure: withTransport(topology.TransportRelay, "")}, nil)
	cfg := *ls.App("hub").Config()
	err := jsplan.StockServerTakes(&cfg, ls.App("hub").Site())
	if err == nil || !strings.Contains(err.Error(), `"server": "nats-server"`) {
		t.Fatalf("a stock hub was provisioned for the relay: %v", err)
	}
}
