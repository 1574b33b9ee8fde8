// Package faultproxytest gives tests a fault proxy that closes with them.
package faultproxytest

import (
	"testing"

	"github.com/leafline/leafline/internal/faultproxy"
)

// Stallable is a proxy on loopback to target that the test can stall
// (Proxy.Stall, Proxy.Heal), closed when the test ends.
func Stallable(t testing.TB, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	p.AllowStall()
	t.Cleanup(func() { p.Close() })
	return p
}
