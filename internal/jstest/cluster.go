package jstest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/internal/loopback"
)

// StartCluster runs an in-process 3-node JetStream cluster on loopback
// and returns its servers, n0 to n2. Killed servers are shut down again
// harmlessly at cleanup.
func StartCluster(t testing.TB) []*server.Server {
	t.Helper()
	ports, err := loopback.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	servers := make([]*server.Server, 3)
	for i := range servers {
		servers[i] = Run(t, &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true,
			Cluster: server.ClusterOpts{Name: "leafline", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
	}
	return servers
}

// ClusterConn connects to every node of servers, trying first (in order)
// from index first, and reconnects forever; it is closed with the test.
func ClusterConn(t testing.TB, servers []*server.Server, first int) *nats.Conn {
	t.Helper()
	var urls []string
	for i := range servers {
		urls = append(urls, servers[(first+i)%len(servers)].ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
