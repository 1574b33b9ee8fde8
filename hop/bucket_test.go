package hop

import (
	"testing"
	"time"
)

// The bucket's arithmetic on a clock of its own: it starts full, fills at
// its rate up to one window's worth, and goes below zero for a message
// larger than what it holds.
func TestBucket_FillsTakesAndOwes(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	b := newBucket(1000, time.Second, t0)
	if h := b.holds(t0); h != 1000 {
		t.Fatalf("a new bucket holds %d, want its window's 1000", h)
	}
	if d := b.until(t0); d != 0 {
		t.Fatalf("a full bucket makes a fetch wait %s", d)
	}
	b.take(1000, t0)
	if d := b.until(t0); d != 500*time.Millisecond {
		t.Fatalf("an empty bucket: wait %s for half a window, want 500ms", d)
	}
	if h := b.holds(at(250 * time.Millisecond)); h != 250 {
		t.Fatalf("after 250ms it holds %d, want 250", h)
	}
	b.take(3000, at(500*time.Millisecond)) // a message of three windows' worth
	if h := b.holds(at(500 * time.Millisecond)); h != -2500 {
		t.Fatalf("after an oversized message it holds %d, want -2500", h)
	}
	if d := b.until(at(500 * time.Millisecond)); d != 3*time.Second {
		t.Fatalf("owing 2500: wait %s, want 3s", d)
	}
	if h := b.holds(at(time.Hour)); h != 1000 {
		t.Fatalf("after an hour it holds %d, want no more than its window's 1000", h)
	}
}

// A saturated link, on the bucket's own clock: each fetch waits as the
// relay does and takes all it is given. Over a minute the bytes moved are
// the rate's, give or take one window.
func TestBucket_HoldsTheAverage(t *testing.T) {
	const rate = 64_000
	for _, msg := range []int64{300, 64_000, 200_000} { // a message smaller, as large as, larger than a window
		now := time.Unix(1_800_000_000, 0)
		end := now.Add(time.Minute)
		b := newBucket(rate, time.Second, now)
		var moved int64
		for {
			now = now.Add(b.until(now))
			if !now.Before(end) {
				break
			}
			n := max(msg, b.holds(now)/msg*msg) // whole messages, at least one
			b.take(n, now)
			moved += n
		}
		lo, hi := int64(rate*60-rate), int64(rate*60+rate+msg)
		if moved < lo || moved > hi {
			t.Errorf("messages of %d bytes: moved %d in a minute, want %d..%d", msg, moved, lo, hi)
		}
	}
}
