package hop_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/hop"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/faultproxy"
	"github.com/leafline/leafline/internal/jstest"
)

// pair is an upstream server and a downstream server linked by a leafnode
// through a proxy that can cut the link.
type pair struct {
	up, down     *server.Server
	upOpts       *server.Options
	proxy        *faultproxy.Proxy
	upJS, downJS jetstream.JetStream
	linkJS       jetstream.JetStream // the upstream's JetStream seen from down
}

func startPair(t *testing.T, window time.Duration) *pair {
	t.Helper()
	return startPairOpts(t, window, false, jetstream.AckAllPolicy)
}

// ackPolicies are the relay consumers' ACK policies: all, as a site
// creates them, and explicit, as a site created them before.
var ackPolicies = []jetstream.AckPolicy{jetstream.AckAllPolicy, jetstream.AckExplicitPolicy}

// startPairOpts is startPair, with both servers under SyncAlways if sync,
// and the relay consumer's ACK policy ack.
func startPairOpts(t testing.TB, window time.Duration, sync bool, ack jetstream.AckPolicy) *pair {
	t.Helper()
	dir := t.TempDir()
	upOpts := &server.Options{ServerName: "up", Host: "127.0.0.1", Port: -1, JetStream: true,
		JetStreamDomain: "up", StoreDir: dir + "/up", NoSigs: true, SyncAlways: sync}
	upOpts.LeafNode.Host, upOpts.LeafNode.Port = "127.0.0.1", -1
	up := jstest.Run(t, upOpts)
	px, err := faultproxy.Listen("127.0.0.1:0", fmt.Sprintf("127.0.0.1:%d", upOpts.LeafNode.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	lu, _ := url.Parse("nats-leaf://" + px.Addr())
	downOpts := &server.Options{ServerName: "down", Host: "127.0.0.1", Port: -1, JetStream: true,
		JetStreamDomain: "down", StoreDir: dir + "/down", NoSigs: true, SyncAlways: sync}
	downOpts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{lu}}}
	downOpts.LeafNode.ReconnectInterval = 100 * time.Millisecond
	down := jstest.Run(t, downOpts)
	p := &pair{up: up, upOpts: upOpts, down: down, proxy: px}
	p.upJS = connect(t, up, "")
	p.downJS = connect(t, down, "")
	p.linkJS = connect(t, down, "up")
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if down.NumLeafNodes() != 1 {
			return errors.New("leafnode not connected")
		}
		return nil
	})
	ctx := context.Background()
	if _, err := p.upJS.CreateStream(ctx, jetstream.StreamConfig{Name: "UP", Subjects: []string{"ev.>"},
		Storage: jetstream.FileStorage, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.upJS.CreateOrUpdateConsumer(ctx, "UP", jetstream.ConsumerConfig{Durable: "relay-down",
		AckPolicy: ack, AckWait: 2 * time.Second, MaxAckPending: 200,
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxRequestBatch: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.downJS.CreateStream(ctx, jetstream.StreamConfig{Name: "DOWN", Subjects: []string{"relay.down.>"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "relay.down.>", Destination: ">"},
		Storage:          jetstream.FileStorage, AllowAtomicPublish: true, Duplicates: window}); err != nil {
		t.Fatal(err)
	}
	return p
}

func connect(t testing.TB, s *server.Server, domain string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.NewWithDomain(nc, domain)
	if domain == "" {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func (p *pair) link() hop.Link {
	return hop.Link{Name: "up-down", Upstream: p.linkJS, Stream: "UP", Consumer: "relay-down",
		Local: p.downJS, LocalStream: "DOWN", Subject: func(s string) string { return "relay.down." + s },
		Marks: []string{"ev.>"}, Batch: 200, Expiry: 500 * time.Millisecond}
}

func (p *pair) publish(t *testing.T, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		m := nats.NewMsg(fmt.Sprintf("ev.%d", i%7))
		m.Data = []byte(fmt.Sprint(i))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("id-%d", i))
		if _, err := p.upJS.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// crashBeforeAck runs a relay on l that stops, as a crash would, after
// its first store and before that batch's ACK.
func (p *pair) crashBeforeAck(t *testing.T, l hop.Link) {
	t.Helper()
	r, err := hop.New(l)
	if err != nil {
		t.Fatal(err)
	}
	crash := errors.New("crash between store and ACK")
	r.SetBeforeAck(func() error { return crash })
	if err := <-p.run(t, r); !errors.Is(err, crash) {
		t.Fatalf("Run returned %v, want the crash", err)
	}
}

// run starts a relay on the link until the test ends or it returns.
func (p *pair) run(t testing.TB, r *hop.Mover) <-chan error {
	ctx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() { done <- r.Run(ctx); close(finished) }()
	t.Cleanup(func() { cancel(); <-finished })
	return done
}

// settled waits until the consumer has nothing pending or unACKed and
// returns the downstream's messages.
func (p *pair) settled(t *testing.T, want int) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		ci, err := p.upJS.Consumer(ctx, "UP", "relay-down")
		if err != nil {
			return err
		}
		info := ci.CachedInfo()
		s, err := p.downJS.Stream(ctx, "DOWN")
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 || s.CachedInfo().State.Msgs < uint64(want) {
			return fmt.Errorf("pending %d, unACKed %d, stored %d of %d", info.NumPending, info.NumAckPending, s.CachedInfo().State.Msgs, want)
		}
		return nil
	})
	s, _ := p.downJS.Stream(ctx, "DOWN")
	var out []*jetstream.RawStreamMsg
	st := s.CachedInfo().State
	for seq := max(st.FirstSeq, 1); seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// exactlyOnce checks that the downstream holds each of n messages once,
// in upstream order, with its id, subject and the relay's headers.
func exactlyOnce(t *testing.T, msgs []*jetstream.RawStreamMsg, n int) {
	t.Helper()
	if len(msgs) != n {
		t.Fatalf("downstream holds %d messages, want %d", len(msgs), n)
	}
	for i, m := range msgs {
		if got, want := m.Header.Get(jetstream.MsgIDHeader), fmt.Sprintf("id-%d", i); got != want {
			t.Fatalf("message %d has id %q, want %q", i+1, got, want)
		}
		if !strings.HasPrefix(m.Subject, "ev.") || m.Header.Get(hop.HeaderLink) != "up-down" ||
			m.Header.Get(hop.HeaderSeq) != fmt.Sprint(i+1) {
			t.Fatalf("message %d: subject %q, headers %v", i+1, m.Subject, m.Header)
		}
	}
}

func TestRelay_MovesEveryMessageOnce(t *testing.T) {
	for _, ack := range ackPolicies {
		t.Run("ack "+ack.String(), func(t *testing.T) {
			p := startPairOpts(t, time.Minute, false, ack)
			p.publish(t, 0, 1100)
			r, err := hop.New(p.link())
			if err != nil {
				t.Fatal(err)
			}
			p.run(t, r)
			exactlyOnce(t, p.settled(t, 1100), 1100)
		})
	}
}

// A crash after the store and before the ACK, and a restart after the
// duplicate window has passed: the redelivered batch is below the mark
// read back from the downstream stream, and is ACKed without a copy.
func TestRelay_CrashBeforeAck_AfterDuplicateWindow(t *testing.T) {
	p := startPair(t, 500*time.Millisecond)
	p.publish(t, 0, 300)
	p.crashBeforeAck(t, p.link())
	time.Sleep(time.Second) // let the duplicate window pass
	r2, err := hop.New(p.link())
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r2)
	p.publish(t, 300, 50)
	exactlyOnce(t, p.settled(t, 350), 350)
	if r2.Mark() != 350 {
		t.Fatalf("mark %d, want 350", r2.Mark())
	}
}

// A link cut while batches are in flight loses deliveries; the relay stores
// nothing behind a lost one, and after the restore every message is stored
// once, in order.
func TestRelay_LinkCutAndRestore(t *testing.T) {
	for _, ack := range ackPolicies {
		t.Run("ack "+ack.String(), func(t *testing.T) {
			p := startPairOpts(t, 200*time.Millisecond, false, ack)
			r, err := hop.New(p.link())
			if err != nil {
				t.Fatal(err)
			}
			p.run(t, r)
			total := 0
			for range 3 {
				p.publish(t, total, 400)
				total += 400
				p.proxy.Cut()
				p.publish(t, total, 200)
				total += 200
				time.Sleep(300 * time.Millisecond) // a cut of some length
				p.proxy.Restore()
			}
			exactlyOnce(t, p.settled(t, total), total)
		})
	}
}

func TestNew_ReportsEveryMissingField(t *testing.T) {
	_, err := hop.New(hop.Link{Name: "x", Batch: 2000})
	if err == nil {
		t.Fatal("New accepted an empty link")
	}
	for _, want := range []string{"Upstream", "Stream and Consumer", "Local and LocalStream", "Subject", "Marks", "Batch 2000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// Deliveries lost in flight (here: fetched by a pull request whose client
// went away) are waited for: nothing behind them is stored first, so the
// mark never passes a message that is not downstream.
func TestRelay_LostDeliveryIsWaitedFor(t *testing.T) {
	p := startPair(t, time.Minute)
	p.publish(t, 0, 150)
	cons, err := p.linkJS.Consumer(context.Background(), "UP", "relay-down")
	if err != nil {
		t.Fatal(err)
	}
	lost, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range lost.Messages() {
		n++
	}
	if n != 10 {
		t.Fatalf("took %d deliveries, want 10", n)
	}
	r, err := hop.New(p.link())
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r)
	exactlyOnce(t, p.settled(t, 150), 150)
}

// A message that was itself sourced into the upstream stream carries a
// header the server refuses in a publish; the relay stores it without.
func TestRelay_MovesSourcedMessages(t *testing.T) {
	p := startPair(t, time.Minute)
	ctx := context.Background()
	if _, err := p.upJS.CreateStream(ctx, jetstream.StreamConfig{Name: "ORIGIN", Subjects: []string{"orig.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.upJS.UpdateStream(ctx, jetstream.StreamConfig{Name: "UP", Subjects: []string{"ev.>"},
		Storage: jetstream.FileStorage, AllowAtomicPublish: true,
		Sources: []*jetstream.StreamSource{{Name: "ORIGIN", SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: "orig.>", Destination: "ev.>"}}}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		m := nats.NewMsg(fmt.Sprintf("orig.%d", i%7))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("id-%d", i))
		if _, err := p.upJS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	r, err := hop.New(p.link())
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r)
	exactlyOnce(t, p.settled(t, 20), 20)
}

// A batch the downstream keeps refusing (here: a stream that takes no
// atomic batches) does not hold the link: after a failed batch the relay
// reads its mark again and stores what follows one message at a time.
func TestRelay_RefusedBatchGoesOneByOne(t *testing.T) {
	p := startPair(t, time.Minute)
	ctx := context.Background()
	s, err := p.downJS.Stream(ctx, "DOWN")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := p.downJS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	p.publish(t, 0, 300)
	r, err := hop.New(p.link())
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r)
	exactlyOnce(t, p.settled(t, 300), 300)
}

func TestStoreBackoff_DoublesUpToItsBound(t *testing.T) {
	want := []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for n, w := range want {
		if got := hop.StoreBackoff(n); got != w {
			t.Errorf("StoreBackoff(%d) = %s, want %s", n, got, w)
		}
	}
	if got := hop.StoreBackoff(1000); got != 10*time.Second {
		t.Errorf("StoreBackoff(1000) = %s, want the bound", got)
	}
}

// A downstream stream that refuses every store (full, DiscardNew): the
// relay tries less and less often instead of looping, ACKs nothing it did
// not store, and moves everything exactly once when the stream takes
// writes again.
func TestRelay_RefusedStoreBacksOffAndResumes(t *testing.T) {
	p := startPair(t, time.Minute)
	ctx := context.Background()
	s, err := p.downJS.Stream(ctx, "DOWN")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs, cfg.Discard = 10, jetstream.DiscardNew
	if _, err := p.downJS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Every store the relay tries reaches the stream's subjects.
	nc, err := nats.Connect(p.down.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var tries atomic.Int64
	sub, err := nc.Subscribe("relay.down.>", func(*nats.Msg) { tries.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	p.publish(t, 0, 100)
	r, err := hop.New(p.link())
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r)
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if r.Mark() != 10 {
			return fmt.Errorf("mark %d, want 10 (the stream's limit)", r.Mark())
		}
		return nil
	})
	time.Sleep(time.Second) // the first refusals
	before := tries.Load()
	const window = 12 * time.Second
	time.Sleep(window)
	// Refused stores in a row wait 1, 2, 4, 8 s: at most 5 tries in the
	// window, where a retry every second (plus a redelivery wait) would
	// be several more. One try is one message: after a refused batch the
	// relay stores one message at a time.
	got := tries.Load() - before
	t.Logf("%d store tries in %s while the stream refused every store", got, window)
	if got > 5 {
		t.Errorf("%d store tries in %s on a stream that refuses every store: the relay does not back off", got, window)
	}
	if ci, err := p.upJS.Consumer(ctx, "UP", "relay-down"); err != nil {
		t.Fatal(err)
	} else if n := ci.CachedInfo().AckFloor.Stream; n > 10 {
		t.Fatalf("the relay ACKed up to %d with only 10 stored", n)
	}
	cfg.MaxMsgs = -1
	if _, err := p.downJS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	exactlyOnce(t, p.settled(t, 100), 100)
	t.Logf("moved the rest %s after the stream took writes again", time.Since(start).Round(100*time.Millisecond))
}

// A link that moves from stream sourcing to the relay, while messages
// flow: the relay's mark comes from the sourced messages' headers, its
// consumer is reset to just after it, and every message is downstream
// once, in order.
func TestRelay_TakesOverFromSourcingWithoutCopies(t *testing.T) {
	// A short duplicate window, passed before the relay starts: a copy
	// would be stored, not dropped by its Nats-Msg-Id.
	p := startPair(t, 100*time.Millisecond)
	ctx := context.Background()
	s, err := p.downJS.Stream(ctx, "DOWN")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	sourcing := cfg
	sourcing.Sources = []*jetstream.StreamSource{{Name: "UP",
		External: &jetstream.ExternalStream{APIPrefix: "$JS.up.API"}}}
	if _, err := p.downJS.UpdateStream(ctx, sourcing); err != nil {
		t.Fatal(err)
	}
	p.publish(t, 0, 400)
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := storedCount(t, p); n < 150 {
			return fmt.Errorf("sourced %d", n)
		}
		return nil
	})
	// The switch: the source goes, and more is published meanwhile.
	if _, err := p.downJS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	sourced := storedCount(t, p)
	p.publish(t, 400, 200)
	time.Sleep(200 * time.Millisecond)
	r, err := hop.New(p.link())
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r)
	msgs := p.settled(t, 600)
	if len(msgs) != 600 {
		t.Fatalf("downstream holds %d messages, want 600 (%d sourced before the switch)", len(msgs), sourced)
	}
	relayed := 0
	for i, m := range msgs {
		if got, want := m.Header.Get(jetstream.MsgIDHeader), fmt.Sprintf("id-%d", i); got != want {
			t.Fatalf("message %d has id %q, want %q", i+1, got, want)
		}
		if m.Header.Get(hop.HeaderLink) != "" {
			relayed++
		}
	}
	if relayed == 0 || relayed == 600 {
		t.Fatalf("%d of 600 relayed: the test did not switch mid-stream", relayed)
	}
	t.Logf("%d sourced, %d relayed", 600-relayed, relayed)
}

// storedCount is how many messages the downstream stream holds.
func storedCount(t *testing.T, p *pair) uint64 {
	t.Helper()
	s, err := p.downJS.Stream(context.Background(), "DOWN")
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// A relay told when the link is back (Link.LinkUp) gives up the pull
// request the cut swallowed and asks again: every message still arrives
// once, in order.
func TestRelay_LinkUpEndsTheLostPullRequest(t *testing.T) {
	p := startPair(t, 200*time.Millisecond)
	var mu sync.Mutex
	up := make(chan struct{})
	l := p.link()
	l.Expiry = time.Minute // without LinkUp, a lost request would hold the link this long
	l.LinkUp = func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return up }
	r, err := hop.New(l)
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r)
	total := 0
	for range 3 {
		p.publish(t, total, 100)
		total += 100
		p.settled(t, total)
		p.proxy.Cut()
		time.Sleep(200 * time.Millisecond)
		p.proxy.Restore()
		check.For(t, 10*time.Second, 10*time.Millisecond, func() error {
			if p.down.NumLeafNodes() != 1 {
				return errors.New("leafnode not back")
			}
			return nil
		})
		mu.Lock()
		close(up)
		up = make(chan struct{})
		mu.Unlock()
		p.publish(t, total, 100)
		total += 100
	}
	exactlyOnce(t, p.settled(t, total), total)
}

// An idle link with LinkUp asks less and less often, up to IdleExpiry,
// and a message published meanwhile still comes at once; without
// IdleExpiry it asks every Expiry.
func TestRelay_IdleLinkAsksLessOften(t *testing.T) {
	for _, idle := range []time.Duration{0, 3 * time.Second} {
		t.Run(fmt.Sprintf("IdleExpiry=%s", idle), func(t *testing.T) {
			p := startPair(t, 200*time.Millisecond)
			nc, err := nats.Connect(p.up.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			var asked atomic.Int64
			if _, err := nc.Subscribe("$JS.API.CONSUMER.MSG.NEXT.UP.relay-down", func(*nats.Msg) { asked.Add(1) }); err != nil {
				t.Fatal(err)
			}
			l := p.link()
			l.Expiry, l.IdleExpiry = 100*time.Millisecond, idle
			l.LinkUp = func() <-chan struct{} { return nil } // never comes up again
			r, err := hop.New(l)
			if err != nil {
				t.Fatal(err)
			}
			p.run(t, r)
			time.Sleep(4 * time.Second)
			n := asked.Load()
			if idle == 0 && n < 20 || idle > 0 && n > 12 {
				t.Errorf("%d pull requests in 4 s", n)
			}
			at := time.Now()
			p.publish(t, 0, 1)
			p.settled(t, 1)
			if d := time.Since(at); d > time.Second {
				t.Errorf("a message took %s to cross an idle link", d)
			}
			t.Logf("%d pull requests in 4 s idle; a message crossed in %s", n, time.Since(at))
		})
	}
}

// A link with Skip ACKs the messages another link carries without storing
// them, across a crash before the ACK and a restart: the downstream holds
// every other message once, in order, and the consumer has nothing left.
func TestRelay_SkipsAnotherLinksMessages(t *testing.T) {
	for _, ack := range ackPolicies {
		t.Run("ack "+ack.String(), func(t *testing.T) {
			p := startPairOpts(t, 200*time.Millisecond, false, ack)
			l := p.link()
			l.Skip = func(s string) bool { return s == "ev.3" }
			p.publish(t, 0, 700)
			p.crashBeforeAck(t, l)
			r2, err := hop.New(l)
			if err != nil {
				t.Fatal(err)
			}
			p.run(t, r2)
			p.publish(t, 700, 4) // ends with ev.3: a batch of skipped messages last
			want := 0
			for i := range 704 {
				if i%7 != 3 {
					want++
				}
			}
			msgs := p.settled(t, want)
			if len(msgs) != want {
				t.Fatalf("downstream holds %d messages, want %d", len(msgs), want)
			}
			prev := 0
			for _, m := range msgs {
				var i int
				fmt.Sscanf(m.Header.Get(jetstream.MsgIDHeader), "id-%d", &i)
				if m.Subject == "ev.3" || i <= prev && prev != 0 || m.Header.Get(hop.HeaderSeq) != fmt.Sprint(i+1) {
					t.Fatalf("stored %s %s after id-%d", m.Subject, m.Header.Get(jetstream.MsgIDHeader), prev)
				}
				prev = i
			}
			check.For(t, 5*time.Second, 20*time.Millisecond, func() error {
				if r2.Mark() != 704 {
					return fmt.Errorf("mark %d, want 704 (the skipped messages count as handled)", r2.Mark())
				}
				return nil
			})
		})
	}
}
