package hop_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/hop"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jsmsg"
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
	return int64(len(m.Data) + jsmsg.HeaderBytes(m.Header))
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

// Two links that share a Cap, one carrying a class (ev.3) at rank 0 and
// the other the rest at rank 1, skipping the class: together they hold
// the cap, and the class's backlog is moved first while the rest keeps
// a share.
func TestRelay_SharedCapCarriesTheUrgentLinkFirst(t *testing.T) {
	const (
		size   = 500
		perSec = 100_000
	)
	p := startPair(t, time.Minute)
	ctx := context.Background()
	if _, err := p.upJS.CreateOrUpdateConsumer(ctx, "UP", jetstream.ConsumerConfig{Durable: "relay-urgent",
		AckPolicy: jetstream.AckAllPolicy, AckWait: 2 * time.Second, MaxAckPending: 200, FilterSubject: "ev.3",
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxRequestBatch: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.downJS.CreateStream(ctx, jetstream.StreamConfig{Name: "URGENT", Subjects: []string{"relay.urgent.>"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "relay.urgent.>", Destination: ">"},
		Storage:          jetstream.FileStorage, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	p.publishSized(t, 0, 1400, size) // 200 on ev.3, 1200 on the others
	cp, err := hop.NewCap(perSec, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	normal := p.link()
	normal.Skip, normal.Cap, normal.Rank = func(s string) bool { return s == "ev.3" }, cp, 1
	urgent := p.link()
	urgent.Name, urgent.Consumer, urgent.LocalStream, urgent.Rank, urgent.Cap = "up-down-urgent", "relay-urgent", "URGENT", 0, cp
	urgent.Subject = func(s string) string { return "relay.urgent." + s }
	stored := func(stream string) uint64 {
		s, err := p.downJS.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.Msgs
	}
	start := time.Now()
	for _, l := range []hop.Link{urgent, normal} {
		r, err := hop.New(l)
		if err != nil {
			t.Fatal(err)
		}
		p.run(t, r)
		// The urgent link's first fetch (most of the full bucket) is
		// in before the other link starts.
		check.For(t, 10*time.Second, 5*time.Millisecond, func() error {
			if stored("URGENT") == 0 {
				return errors.New("urgent link has stored nothing yet")
			}
			return nil
		})
	}
	var normalThen uint64
	check.For(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := stored("URGENT"); n < 200 {
			return fmt.Errorf("urgent stored %d of 200", n)
		}
		normalThen = stored("DOWN")
		return nil
	})
	urgentDone := time.Since(start)
	// The urgent link had four fifths of the cap: the rest moved about a
	// quarter as much meanwhile (50 messages), where an equal share would
	// have moved as much (200).
	if normalThen >= 100 {
		t.Errorf("when the urgent backlog was all moved (%s), the other link had stored %d messages, want fewer than half the urgent link's 200", urgentDone, normalThen)
	}
	check.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n := stored("DOWN"); n < 1200 {
			return fmt.Errorf("others stored %d of 1200", n)
		}
		return nil
	})
	// Together the links held the cap: 700 KB (and headers) at 100 KB/s
	// after a full bucket of 20 KB, so at least 6.8 s; 6 s allows for the
	// last fetches' debt.
	if el := time.Since(start); el < 6*time.Second {
		t.Errorf("1400 messages of %d bytes moved in %s under a shared cap of %d bytes/s; want at least 6s", size, el, perSec)
	}
	t.Logf("urgent backlog moved in %s, the other link's %d messages by then; all in %s", urgentDone, normalThen, time.Since(start))
}
