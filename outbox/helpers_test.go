package outbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a settable clock that counts its readings.
type testClock struct {
	mu    sync.Mutex
	t     time.Time
	reads atomic.Int64
}

func newClock() *testClock {
	return &testClock{t: time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.reads.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

func (c *testClock) peek() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// openTest opens a new outbox in a temporary directory, closed at cleanup.
func openTest(t testing.TB) (*Outbox, *testClock) {
	t.Helper()
	clk := newClock()
	o, err := Open(filepath.Join(t.TempDir(), "data", "outbox.db"), Options{Now: clk.Now})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return o, clk
}

func rec(key string) Record {
	return Record{Key: key, Subject: "receipts.edge1", Data: []byte("data-" + key)}
}

func recs(keys ...string) []Record {
	out := make([]Record, len(keys))
	for i, k := range keys {
		out[i] = rec(k)
	}
	return out
}

func mustCommit(t testing.TB, o *Outbox, rs ...Record) []Record {
	t.Helper()
	out, err := o.Commit(rs, nil)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return out
}

func mustGet(t testing.TB, o *Outbox, key string) Record {
	t.Helper()
	r, ok, err := o.Get(key)
	if err != nil || !ok {
		t.Fatalf("Get(%q) = ok %v, err %v", key, ok, err)
	}
	return r
}

func mustStats(t testing.TB, o *Outbox) Stats {
	t.Helper()
	s, err := o.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return s
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
