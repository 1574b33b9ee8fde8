package hop_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/hop"
)

// publishSized publishes n messages from number from on, each with a
// payload of size bytes.
func (p *pair) publishSized(t *testing.T, from, n, size int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		m := nats.NewMsg(fmt.Sprintf("ev.%d", i%7))
		m.Data = []byte(fmt.Sprintf("%d:%s", i, strings.Repeat("x", size)))[:size]
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("id-%d", i))
		if _, err := p.upJS.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// upstreamBytes is what the cap counts of the upstream message at seq.
func (p *pair) upstreamBytes(t *testing.T, seq string) int64 {
	t.Helper()
	ctx := context.Background()
	s, err := p.upJS.Stream(ctx, "UP")
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	fmt.Sscan(seq, &n)
	m, err := s.GetMsg(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(m.Data) + hop.HeaderBytes(m.Header))
}

// A capped relay moves everything once, in order, and stores it in atomic
// batches that each carry at most the cap's window of bytes.
func TestRelay_CappedMovesEveryMessageOnce(t *testing.T) {
	const (
		n, size = 300, 200
		perSec  = 100_000
		window  = 100 * time.Millisecond
		burst   = perSec / 10 // one window's worth
	)
	for _, ack := range ackPolicies {
		t.Run("ack "+ack.String(), func(t *testing.T) {
			p := startPairOpts(t, time.Minute, false, ack)
			p.publishSized(t, 0, n, size)
			l := p.link()
			l.BytesPerSecond, l.Window = perSec, window
			r, err := hop.New(l)
			if err != nil {
				t.Fatal(err)
			}
			p.run(t, r)
			msgs := p.settled(t, n)
			exactlyOnce(t, msgs, n)
			// The relay's atomic batches, by the id the server keeps on
			// each message stored in one.
			batches := map[string]int64{}
			for _, m := range msgs {
				if id := m.Header.Get("Nats-Batch-Id"); id != "" {
					batches[id] += p.upstreamBytes(t, m.Header.Get(hop.HeaderSeq))
				}
			}
			if len(batches) < 5 {
				t.Fatalf("%d atomic batches for %d messages of %d bytes under a window of %d bytes: the fetches are not bounded by the cap", len(batches), n, size, burst)
			}
			for id, b := range batches {
				if b > burst {
					t.Errorf("batch %s carried %d bytes, more than the window's %d", id, b, burst)
				}
			}
		})
	}
}

// A cap smaller than one message does not hold the link: each message
// moves alone, once, in order.
func TestRelay_CapBelowOneMessageStillMoves(t *testing.T) {
	const n, size = 3, 1500
	p := startPair(t, time.Minute)
	p.publishSized(t, 0, n, size)
	l := p.link()
	l.BytesPerSecond = 1000 // a second's worth is two thirds of a message
	r, err := hop.New(l)
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r)
	exactlyOnce(t, p.settled(t, n), n)
}

func TestNew_RefusesABadCap(t *testing.T) {
	p := startPair(t, time.Minute)
	l := p.link()
	l.BytesPerSecond, l.Window = -1, 2*time.Minute
	_, err := hop.New(l)
	if err == nil {
		t.Fatal("New accepted a negative cap and a 2m window")
	}
	for _, want := range []string{"BytesPerSecond -1 is negative", "Window 2m0s is outside 0..1m0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
