// Package check is the one polling helper of the module's tests: wait for
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
