package systest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/status/console"
	"github.com/leafline/leafline/topology"
)

// leafCompression is the compression nats-server settled on for srv's
// leafnode connection to the site named name ("" when there is none).
func leafCompression(srv *server.Server, name string) string {
	lz, err := srv.Leafz(nil)
	if err != nil {
		return ""
	}
	for _, l := range lz.Leafs {
		if l.Name == name {
			return l.Compression
		}
	}
	return ""
}

// Each link is compressed as the topology says, at both ends, when the
// hub's links differ (its listener then accepts); and each link's bytes
// are exported per direction, go on across a reconnection, and reach the
// hub's link beat.
func TestSystem_LinkCompressionAndBytes(t *testing.T) {
	ls := testSystem(t, Options{Edges: 2, Configure: func(c *topology.Config) {
		c.Topology.Compression = topology.CompressionOff
		if s, ok := c.Topology.Site("edge1"); ok {
			s.Compression = topology.CompressionS2Best
		}
	}}, nil)
	hub, edge1, edge2 := ls.App("hub"), ls.App("edge1"), ls.App("edge2")
	if g := hub.Config().Topology.ListenerCompression(hub.Site()); g != topology.CompressionAccept {
		t.Fatalf("hub listener compression %q, want accept", g)
	}
	for _, c := range []struct {
		srv        *server.Server
		peer, want string
	}{
		{edge1.Server(), "hub", "s2_best"}, {hub.Server(), "edge1", "s2_best"},
		{edge2.Server(), "hub", "off"}, {hub.Server(), "edge2", "off"},
	} {
		if g := leafCompression(c.srv, c.peer); g != c.want {
			t.Errorf("%s's link to %s: compression %q, want %q", c.srv.Name(), c.peer, g, c.want)
		}
	}

	const n, size = 100, 256
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	first := publishData(t, js, "bytes", n, make([]byte, size))
	waitCompleted(t, ls, first, "edge1", "edge2")
	val := func(a *box.App, link, dir string) float64 {
		return registryValue(t, a.Metrics().Registry(), "leafline_link_bytes_total", map[string]string{"link": link, "direction": dir})
	}
	// Down: every event, uncompressed; up: a receipt each.
	if d, u := val(edge1, "hub", "in"), val(edge1, "hub", "out"); d < n*size || u == 0 {
		t.Fatalf("edge1's link bytes in %v (want ≥ %d), out %v", d, n*size, u)
	}
	if d := val(hub, "edge1", "out"); d < n*size {
		t.Fatalf("hub's link to edge1: %v bytes out, want ≥ %d", d, n*size)
	}

	in0 := val(edge1, "hub", "in")
	ls.Links["edge1"].Cut()
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if edge1.UpstreamConnected() {
			return errors.New("edge1 still connected")
		}
		return nil
	})
	if g := val(edge1, "hub", "in"); g < in0 {
		t.Fatalf("link down: bytes in fell from %v to %v", in0, g)
	}
	ls.Links["edge1"].Restore()
	waitCompleted(t, ls, append(first, publishData(t, js, "after", n, make([]byte, size))...), "edge1", "edge2")
	if g := val(edge1, "hub", "in"); g < in0+n*size {
		t.Fatalf("after a reconnection: bytes in %v, want ≥ %v", g, in0+n*size)
	}
	// The hub's beat carries them to L1's console.
	check.For(t, 10*time.Second, 100*time.Millisecond, func() error {
		var snap console.Snapshot
		if code, err := getJSON("http://"+ls.App("l1").OpsAddr()+"/console/state.json", &snap); err != nil || code != 200 {
			return fmt.Errorf("console: %d %v", code, err)
		}
		for _, s := range snap.Sites {
			if s.Site == "edge1" && s.Link.Down >= 2*n*size && s.Link.Up > 0 {
				return nil
			}
		}
		return fmt.Errorf("console sites %+v", snap.Sites)
	})
}
