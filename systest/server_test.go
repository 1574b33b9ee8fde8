package systest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestStart_LeafnodePortInUse: a box whose leafnode port is taken fails to
// start with the server's own reason, naming the port, as soon as the
// server gives up, not after the readiness timeout.
func TestStart_LeafnodePortInUse(t *testing.T) {
	ls, err := newLocal(t.TempDir(), Options{Logger: testLogger(t), Insecure: true, UnsignedReceipts: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	site, _ := ls.Topology.Site("l1")
	taken, err := net.Listen("tcp", site.Leafnode.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, port, _ := net.SplitHostPort(site.Leafnode.Listen)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err = ls.Start(ctx, "l1")
	if err == nil {
		t.Fatal("l1 started on a leafnode port in use")
	}
	for _, want := range []string{"leafnode port: " + port, "address already in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if waited := time.Since(start); waited >= 30*time.Second {
		t.Errorf("the error came after %s, the whole readiness timeout", waited)
	}
}
