// Package loopback finds free ports on 127.0.0.1 for the demo, tests and
// the chaos driver.
package loopback

import "net"

// FreePorts finds n free loopback ports. They are released before use, so
// another process could take one meanwhile; fine for demos and tests.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
