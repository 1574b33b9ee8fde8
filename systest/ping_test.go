package systest

import (
	"errors"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/faultproxy"
	"github.com/leafline/leafline/internal/faultproxy/faultproxytest"
	"github.com/leafline/leafline/topology"
)

// A link that silently drops packets (no FIN, no RST) is seen down after a
// few missed pings, not after the minutes of TCP's own timeouts.
func TestLink_StalledLinkSeenDown(t *testing.T) {
	var proxy *faultproxy.Proxy
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		c.Leafnode.PingInterval = topology.Duration(time.Second)
		if c.Site == "edge1" {
			hub, _ := c.Topology.Site("hub")
			proxy = faultproxytest.Stallable(t, hub.Leafnode.Listen)
			c.Leafnode.UpstreamURL = "nats-leaf://" + proxy.Addr()
		}
	}}, nil)
	edge := ls.App("edge1")
	proxy.Stall()
	start := time.Now()
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if edge.UpstreamConnected() {
			return errors.New("edge1 still reports its stalled link connected")
		}
		return nil
	})
	t.Logf("stalled link seen down after %s (ping_interval 1s, 3 pings out)", time.Since(start).Round(100*time.Millisecond))
	proxy.Heal()
	waitLinks(t, ls)
}
