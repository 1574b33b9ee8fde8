// Package check holds the polling helpers of the module's tests: wait for
// a condition on real state, with a bound, and say what was last seen when
// the bound passes.
package check

import (
	"testing"
	"time"
)

// For calls f every interval until it returns nil, and fails t with f's
// last error if total passes first. f reports what it saw (an error naming
// the state), never just "false", so that a failure says why.
func For(t testing.TB, total, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", total, err)
		}
		time.Sleep(interval)
	}
}

// Stays calls f every interval for d, and fails t at the first error it
// returns: a condition that must hold for a while (nothing delivered,
// nothing ACKed), where For waits for one to come true.
func Stays(t testing.TB, d, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := f(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(interval)
	}
}
