package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/logx/logxtest"
)

// fakePublisher records what it is asked to publish and fails on demand.
// NATS is out of scope for this package; the edge tests the real one.
type fakePublisher struct {
	mu       sync.Mutex
	calls    [][]Record
	failures int // fail this many more calls
	hook     func(ctx context.Context, recs []Record) error
}

func (p *fakePublisher) Publish(ctx context.Context, recs []Record) error {
	p.mu.Lock()
	p.calls = append(p.calls, recs)
	fail := p.failures > 0
	if fail {
		p.failures--
	}
	hook := p.hook
	p.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, recs); err != nil {
			return err
		}
	}
	if fail {
		return errors.New("no PubAck: stream unavailable")
	}
	return nil
}

func (p *fakePublisher) published() (calls int, keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.calls {
		keys = append(keys, keysOf(c)...)
	}
	return len(p.calls), keys
}

// startRelay runs r in the background. stop cancels it and returns Run's
// result; done is closed when Run has returned.
func startRelay(t *testing.T, r *Relay) (stop func() error, done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	var result error
	go func() {
		result = r.Run(ctx)
		close(finished)
	}()
	stop = func() error {
		cancel()
		select {
		case <-finished:
			return result
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancel")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop, finished
}

func pendingCount(o *Outbox) (int, error) {
	s, err := o.Stats()
	return s.Pending, err
}

func waitAllPublished(t *testing.T, o *Outbox) {
	t.Helper()
	check.For(t, 10*time.Second, time.Millisecond, func() error {
		n, err := pendingCount(o)
		if err == nil && n != 0 {
			err = errorf("%d records still pending", n)
		}
		return err
	})
}

func TestRelay_RetriesAfterFailureThenMarks(t *testing.T) {
	o, clk := openTest(t)
	secret := rec("a")
	secret.Data = []byte("SECRET-PAYLOAD")
	mustCommit(t, o, secret, rec("b"))
	clk.Advance(time.Minute)

	p := &fakePublisher{failures: 2}
	var logs logxtest.Buffer
	var published, failed atomic.Int64
	r := NewRelay(o, p, RelayConfig{
		Interval:    time.Millisecond,
		MinAge:      time.Second,
		Logger:      slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnPublished: func(n int) { published.Add(int64(n)) },
		OnError:     func(error) { failed.Add(1) },
	})
	stop, _ := startRelay(t, r)
	waitAllPublished(t, o)
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	calls, keys := p.published()
	if calls != 3 || len(keys) != 6 {
		t.Errorf("publisher saw %d calls, keys %v; want 3 calls of a, b", calls, keys)
	}
	if failed.Load() != 2 || published.Load() != 2 {
		t.Errorf("OnError %d times, OnPublished total %d; want 2 and 2", failed.Load(), published.Load())
	}
	for _, k := range []string{"a", "b"} {
		if r := mustGet(t, o, k); r.State != StatePublished {
			t.Errorf("%s: %s", k, r.State)
		}
	}
	out := logs.String()
	if !bytes.Contains([]byte(out), []byte("publish failed")) {
		t.Errorf("failure not logged:\n%s", out)
	}
	if bytes.Contains([]byte(out), []byte("SECRET")) {
		t.Errorf("record Data logged:\n%s", out)
	}
}

// A publish that fails after some PubAcks marks those: the next try
// publishes only the rest, so a copy cannot outlive the duplicate window.
func TestRelay_MarksWhatAPartialFailurePublished(t *testing.T) {
	o, clk := openTest(t)
	mustCommit(t, o, rec("a"), rec("b"), rec("c"))
	clk.Advance(time.Minute)

	var tries atomic.Int64
	p := &fakePublisher{hook: func(ctx context.Context, recs []Record) error {
		if tries.Add(1) == 1 {
			// 7 is out of range: ignored.
			return &PartialError{Published: []int{0, 2, 7}, Err: errors.New("maximum bytes exceeded")}
		}
		return nil
	}}
	var published atomic.Int64
	r := NewRelay(o, p, RelayConfig{Interval: time.Millisecond, OnPublished: func(n int) { published.Add(int64(n)) }, Logger: slog.New(slog.DiscardHandler)})
	stop, _ := startRelay(t, r)
	waitAllPublished(t, o)
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) != 2 || !slices.Equal(keysOf(p.calls[0]), []string{"a", "b", "c"}) || !slices.Equal(keysOf(p.calls[1]), []string{"b"}) {
		var got [][]string
		for _, c := range p.calls {
			got = append(got, keysOf(c))
		}
		t.Fatalf("publisher saw %v; want [[a b c] [b]]", got)
	}
	if published.Load() != 3 {
		t.Errorf("OnPublished total %d, want 3", published.Load())
	}
}

func TestPartiallyPublished(t *testing.T) {
	recs := []Record{rec("a"), rec("b")}
	for _, tt := range []struct {
		err  error
		want []string
	}{
		{nil, []string{}},
		{errors.New("no PubAck"), []string{}},
		{&PartialError{Published: []int{1}, Err: errors.New("full")}, []string{"b"}},
		{fmt.Errorf("wrapped: %w", &PartialError{Published: []int{-1, 0, 2}}), []string{"a"}},
	} {
		if got := keysOf(PartiallyPublished(recs, tt.err)); !slices.Equal(got, tt.want) {
			t.Errorf("PartiallyPublished(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestRelay_MinAge(t *testing.T) {
	o, clk := openTest(t)
	mustCommit(t, o, rec("fresh"))
	p := &fakePublisher{}
	r := NewRelay(o, p, RelayConfig{Interval: time.Millisecond, MinAge: time.Hour})
	startRelay(t, r)

	// Let the relay look several times (each look reads the clock).
	start := clk.reads.Load()
	check.For(t, 10*time.Second, time.Millisecond, func() error {
		if n := clk.reads.Load() - start; n < 5 {
			return errorf("relay looked %d times", n)
		}
		return nil
	})
	if calls, _ := p.published(); calls != 0 {
		t.Fatalf("relay published a record younger than MinAge (%d calls)", calls)
	}
	clk.Advance(time.Hour)
	waitAllPublished(t, o)
	if _, keys := p.published(); len(keys) != 1 || keys[0] != "fresh" {
		t.Errorf("published %v", keys)
	}
}

func TestRelay_Kick(t *testing.T) {
	o, clk := openTest(t)
	p := &fakePublisher{}
	r := NewRelay(o, p, RelayConfig{Interval: time.Hour, MinAge: time.Second})
	startRelay(t, r)
	check.For(t, 10*time.Second, time.Millisecond, func() error { // the look Run does on start
		if clk.reads.Load() == 0 {
			return errorf("relay has not looked yet")
		}
		return nil
	})
	mustCommit(t, o, rec("a"))
	clk.Advance(time.Minute)
	r.Kick()
	r.Kick() // merged, never blocks
	waitAllPublished(t, o)
}

func TestRelay_FullBatchesDoNotWait(t *testing.T) {
	o, clk := openTest(t)
	mustCommit(t, o, recs("a", "b", "c", "d", "e")...)
	clk.Advance(time.Minute)
	p := &fakePublisher{}
	r := NewRelay(o, p, RelayConfig{Interval: time.Hour, BatchSize: 2})
	startRelay(t, r)
	waitAllPublished(t, o)
	p.mu.Lock()
	defer p.mu.Unlock()
	var sizes []int
	for _, c := range p.calls {
		sizes = append(sizes, len(c))
	}
	if len(sizes) != 3 || sizes[0] != 2 || sizes[1] != 2 || sizes[2] != 1 {
		t.Errorf("batch sizes %v, want [2 2 1]", sizes)
	}
	if got := keysOf(p.calls[0]); got[0] != "a" || got[1] != "b" {
		t.Errorf("first batch %v, want oldest first", got)
	}
}

func TestRelay_PublishTimeout(t *testing.T) {
	o, clk := openTest(t)
	mustCommit(t, o, rec("a"))
	clk.Advance(time.Minute)
	var timedOut atomic.Bool
	p := &fakePublisher{hook: func(ctx context.Context, _ []Record) error {
		if timedOut.Load() {
			return nil
		}
		<-ctx.Done() // never PubAck'ed: wait for the per-call timeout
		timedOut.Store(true)
		return ctx.Err()
	}}
	var errs atomic.Int64
	r := NewRelay(o, p, RelayConfig{Interval: time.Millisecond, Timeout: 20 * time.Millisecond,
		OnError: func(err error) {
			if errors.Is(err, context.DeadlineExceeded) {
				errs.Add(1)
			}
		}})
	startRelay(t, r)
	waitAllPublished(t, o)
	if errs.Load() != 1 {
		t.Errorf("OnError saw %d deadline errors, want 1", errs.Load())
	}
}

func TestRelay_RunReturnsNilOnCancel(t *testing.T) {
	tests := []struct {
		name string
		hook func(ctx context.Context, _ []Record) error
	}{
		{"between looks", nil},
		{"while publishing", func(ctx context.Context, _ []Record) error { <-ctx.Done(); return ctx.Err() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, clk := openTest(t)
			mustCommit(t, o, rec("a"))
			clk.Advance(time.Minute)
			entered := make(chan struct{}, 1)
			p := &fakePublisher{hook: func(ctx context.Context, recs []Record) error {
				select {
				case entered <- struct{}{}:
				default:
				}
				if tt.hook != nil {
					return tt.hook(ctx, recs)
				}
				return nil
			}}
			r := NewRelay(o, p, RelayConfig{Interval: time.Millisecond, Timeout: time.Hour})
			stop, _ := startRelay(t, r)
			<-entered
			if err := stop(); err != nil {
				t.Fatalf("Run = %v, want nil", err)
			}
		})
	}
}

func TestRelay_OutboxErrorIsFatal(t *testing.T) {
	o, clk := openTest(t)
	mustCommit(t, o, rec("a"))
	clk.Advance(time.Minute)
	// The outbox goes away between the PubAck and MarkPublished.
	p := &fakePublisher{hook: func(context.Context, []Record) error { return o.Close() }}
	r := NewRelay(o, p, RelayConfig{Interval: time.Millisecond})
	stop, done := startRelay(t, r)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return the outbox error")
	}
	if err := stop(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want an error wrapping ErrClosed", err)
	}

	// The record was PubAck'ed but not marked: still pending after reopen.
	o2, err := Open(o.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer o2.Close()
	if r := mustGet(t, o2, "a"); r.State != StatePending {
		t.Errorf("a = %s, want pending", r.State)
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		interval time.Duration
		failures int
		want     time.Duration
	}{
		{time.Second, 1, time.Second},
		{time.Second, 2, 2 * time.Second},
		{time.Second, 5, 16 * time.Second},
		{time.Second, 6, 30 * time.Second},
		{time.Second, 1000, 30 * time.Second},
		{time.Minute, 3, time.Minute},
	}
	for _, tt := range tests {
		if got := backoff(tt.interval, tt.failures); got != tt.want {
			t.Errorf("backoff(%v, %d) = %v, want %v", tt.interval, tt.failures, got, tt.want)
		}
	}
}

func TestNewRelay_Defaults(t *testing.T) {
	o, _ := openTest(t)
	r := NewRelay(o, &fakePublisher{}, RelayConfig{})
	c := r.cfg
	if c.Interval != time.Second || c.MinAge != 2*time.Second || c.BatchSize != 256 || c.Timeout != 5*time.Second || c.Logger == nil {
		t.Errorf("defaults: %+v", c)
	}
}
