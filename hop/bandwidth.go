package hop

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/jsmsg"
)

// capLinger stands in for "no wait" in a fetch bounded by bytes, which
// FetchNoWait cannot be: the server ends the pull request once the bytes
// are used up, or after capLinger with what there was.
const capLinger = 20 * time.Millisecond

// maxWindow bounds Link.Window: a longer one lets a link that was quiet
// send minutes' worth of bytes at once, which is no cap.
const maxWindow = time.Minute

// bucket is a link's cap (Link.BytesPerSecond) as a token bucket of
// bytes: it holds up to burst, one Window's worth, fills at rate bytes a
// second, and starts full. Each message fetched takes its bytes out. A
// message larger than what the bucket holds (larger than the whole
// Window's worth, or taken when the bucket is half empty) takes it below
// zero, so that no message is too large to move; the relay then waits
// until the bucket has filled back to half.
type bucket struct {
	rate, burst float64
	tokens      float64 // what it held at `at`
	at          time.Time
}

func newBucket(perSecond int64, window time.Duration, now time.Time) *bucket {
	burst := max(1, float64(perSecond)*window.Seconds())
	return &bucket{rate: float64(perSecond), burst: burst, tokens: burst, at: now}
}

// fill brings the bucket up to now.
func (b *bucket) fill(now time.Time) {
	if now.After(b.at) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
		b.at = now
	}
}

// take takes n bytes out at now.
func (b *bucket) take(n int64, now time.Time) {
	b.fill(now)
	b.tokens -= float64(n)
}

// holds is the whole bytes the bucket holds at now (below zero after an
// oversized message).
func (b *bucket) holds(now time.Time) int64 {
	b.fill(now)
	return int64(math.Floor(b.tokens))
}

// until is how long after now the bucket holds half its burst, the least
// a fetch is given: a link with a backlog then moves a batch per half to
// whole Window rather than a message at a time.
func (b *bucket) until(now time.Time) time.Duration {
	b.fill(now)
	need := math.Ceil(b.burst/2) - b.tokens
	if need <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(need / b.rate * float64(time.Second)))
}

// Cap is a bandwidth cap that several links' relays share: the links of
// one leafnode link that carry its priority classes and the rest of its
// stream (Link.Cap). Together they move at most what one link with
// BytesPerSecond would; a more urgent link's backlog takes most of it
// (see the package doc, # A bandwidth cap).
type Cap struct {
	mu   sync.Mutex
	b    *bucket
	busy map[int]bool // by rank: the link's last fetch brought messages
}

// NewCap returns a cap of bytesPerSecond averaged over window (0: 1s).
func NewCap(bytesPerSecond int64, window time.Duration) (*Cap, error) {
	if window == 0 {
		window = time.Second
	}
	if bytesPerSecond <= 0 || window < 0 || window > maxWindow {
		return nil, fmt.Errorf("hop: cap %d bytes/s over %s: want a positive rate over 0..%s", bytesPerSecond, window, maxWindow)
	}
	return &Cap{b: newBucket(bytesPerSecond, window, time.Now()), busy: map[int]bool{}}, nil
}

// urgentShare is the share of what the bucket holds that a link may
// fetch while a more urgent link sharing its cap has a backlog: it then
// gets at least a fifth of the cap (its quarter against the urgent one's
// whole), and the urgent link the rest.
const urgentShare = 4

// until is how long until the cap holds half its burst.
func (c *Cap) until(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.until(now)
}

// allow is what a fetch of the link of rank may carry at now: what the
// bucket holds, or a quarter of it while a more urgent link is busy.
func (c *Cap) allow(rank int, now time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.b.holds(now)
	for k, busy := range c.busy {
		if busy && k < rank {
			return max(n/urgentShare, 1)
		}
	}
	return n
}

// took takes n bytes that the link of rank fetched, and notes whether it
// has a backlog (its fetch brought messages).
func (c *Cap) took(rank int, n int64, msgs int, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b.take(n, now)
	c.busy[rank] = msgs > 0
}

// msgBytes is what the cap counts of a message pulled across the link:
// its payload and its headers as they are sent (the "NATS/1.0" line,
// each "Key: value" line and the blank line that ends them), the bytes
// nats-server's leafnode statistics count for it. Not its subject, its
// ACK reply subject or the protocol line around it.
func msgBytes(m jetstream.Msg) int64 {
	return int64(len(m.Data()) + jsmsg.HeaderBytes(m.Headers()))
}

// budget waits until the link's cap lets the next fetch move half a
// Window's worth and returns what the bucket then holds, the bytes the
// fetch may carry; 0 means no bound (no cap, or a fetch that must take
// every unACKed message at once: Mover.takeAll). It returns 0 early when
// ctx ends.
func (r *Mover) budget(ctx context.Context) int64 {
	all := r.takeAll
	r.takeAll = false
	if r.cap == nil {
		return 0
	}
	for {
		d := r.cap.until(time.Now())
		if d <= 0 {
			break
		}
		ctxsleep.For(ctx, d)
		if ctx.Err() != nil {
			return 0
		}
	}
	if all {
		return 0
	}
	return r.cap.allow(r.l.Rank, time.Now())
}

// charge takes the bytes of msgs, which crossed the link, out of the
// link's cap.
func (r *Mover) charge(msgs []jetstream.Msg) {
	if r.cap == nil {
		return
	}
	var n int64
	for _, m := range msgs {
		n += msgBytes(m)
	}
	r.cap.took(r.l.Rank, n, len(msgs), time.Now())
}
