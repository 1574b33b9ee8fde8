// Package loopback finds free ports on 127.0.0.1 for the demo, tests and
// the chaos driver.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
)

// lowest is the lowest port handed out.
const lowest = 10000

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// FreePorts finds n free loopback ports. They are released before use, so
// they are taken below the kernel's ephemeral range when it leaves room:
// there no outgoing connection and no listener on port 0 can take one
// meanwhile, as happened to a test's leafnode port. A port is handed out
// once per process. Another process could still bind one explicitly; fine
// for demos and tests.
func FreePorts(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	hi := ephemeralLow()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if hi > lowest && tries < 100*n {
			p := lowest + rand.IntN(hi-lowest)
			if handed[p] {
				continue
			}
			addr = fmt.Sprintf("127.0.0.1:%d", p)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, err
			}
			continue
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, p := range ports {
		handed[p] = true
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0 if
// it is unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0
	}
	return lo
}
