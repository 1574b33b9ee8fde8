package loopback

import (
	"fmt"
	"net"
	"testing"
)

// TestFreePorts: the ports are distinct across calls, free, and outside
// the kernel's ephemeral range, where outgoing connections take theirs.
func TestFreePorts(t *testing.T) {
	lo := ephemeralLow()
	if lo <= lowest {
		t.Skipf("ephemeral range starts at %d: no room below it, ports come from it", lo)
	}
	seen := map[int]bool{}
	for range 20 {
		ports, err := FreePorts(5)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			if p < lowest || p >= lo {
				t.Fatalf("port %d outside [%d, %d)", p, lowest, lo)
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				t.Fatalf("port %d is not free: %v", p, err)
			}
			l.Close()
		}
	}
}
