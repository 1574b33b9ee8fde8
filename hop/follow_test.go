package hop_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/hop"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
)

// restartUp stops the upstream server, runs change on its store dir, and
// starts it again on the same ports.
func (p *pair) restartUp(t *testing.T, change func(dir string)) {
	t.Helper()
	p.up.Shutdown()
	p.up.WaitForShutdown()
	change(p.upOpts.StoreDir)
	opts := p.upOpts.Clone()
	p.up = jstest.Run(t, opts)
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if p.down.NumLeafNodes() != 1 {
			return fmt.Errorf("leafnode not connected")
		}
		return nil
	})
}

// createUp creates the upstream stream and the relay's consumer.
func (p *pair) createUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := p.upJS.CreateStream(ctx, jetstream.StreamConfig{Name: "UP", Subjects: []string{"ev.>"},
		Storage: jetstream.FileStorage, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.upJS.CreateOrUpdateConsumer(ctx, "UP", jetstream.ConsumerConfig{Durable: "relay-down",
		AckPolicy: jetstream.AckAllPolicy, AckWait: 2 * time.Second, MaxAckPending: 200,
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxRequestBatch: 1000}); err != nil {
		t.Fatal(err)
	}
}

// holdsIDs waits until the downstream holds every id of [from, to) at
// least once.
func (p *pair) holdsIDs(t *testing.T, from, to int) {
	t.Helper()
	ctx := context.Background()
	check.For(t, 30*time.Second, 100*time.Millisecond, func() error {
		s, err := p.downJS.Stream(ctx, "DOWN")
		if err != nil {
			return err
		}
		have := map[string]bool{}
		st := s.CachedInfo().State
		for seq := st.FirstSeq; seq <= st.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				return err
			}
			have[m.Header.Get(jetstream.MsgIDHeader)] = true
		}
		for i := from; i < to; i++ {
			if !have[fmt.Sprintf("id-%d", i)] {
				return fmt.Errorf("id-%d not stored downstream (%d messages)", i, st.Msgs)
			}
		}
		return nil
	})
}

// runWhile runs a relay on l while work runs, then stops it and fails if
// it returned an error.
func (p *pair) runWhile(t *testing.T, l hop.Link, work func()) {
	t.Helper()
	r, err := hop.New(l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	work()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// changes records what a relay reports of its upstream (Link.Changed).
type changes struct {
	mu  sync.Mutex
	got []hop.UpstreamChange
}

func (c *changes) add(u hop.UpstreamChange) { c.mu.Lock(); c.got = append(c.got, u); c.mu.Unlock() }

func (c *changes) kinds() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, u := range c.got {
		out = append(out, u.Kind)
	}
	return out
}

// runWatched runs a relay on p's link and returns what it reports of its
// upstream.
func (p *pair) runWatched(t *testing.T) *changes {
	t.Helper()
	ch := &changes{}
	l := p.link()
	l.Changed = ch.add
	r, err := hop.New(l)
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r)
	return ch
}

// wantChanges fails unless the relay reported exactly kinds.
func wantChanges(t *testing.T, ch *changes, kinds ...string) {
	t.Helper()
	if got := ch.kinds(); fmt.Sprint(got) != fmt.Sprint(kinds) {
		t.Fatalf("relay reported upstream changes %v, want %v", got, kinds)
	}
}

// An upstream stream created again starts its sequences again: the
// stream deleted and created (an operator), or its server's store lost
// (a box replaced with a blank disk). The relay finds another stream
// identity, takes the new stream from its first message, and skips none
// of it, although the new messages' sequences are below its mark.
func TestRelay_UpstreamCreatedAgain(t *testing.T) {
	for _, c := range []struct {
		name string
		lose func(t *testing.T, p *pair)
	}{
		{"stream deleted", func(t *testing.T, p *pair) {
			if err := p.upJS.DeleteStream(context.Background(), "UP"); err != nil {
				t.Fatal(err)
			}
		}},
		{"store wiped", func(t *testing.T, p *pair) {
			p.restartUp(t, func(dir string) {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startPair(t, time.Minute)
			ch := p.runWatched(t)
			p.publish(t, 0, 300)
			p.holdsIDs(t, 0, 300)
			c.lose(t, p)
			p.createUp(t)
			p.publish(t, 300, 100)
			p.holdsIDs(t, 300, 400)
			wantChanges(t, ch, hop.UpstreamReplaced)
		})
	}
}

// An upstream server restored from a copy of its store taken earlier
// keeps its stream's identity, but not what the relay stored after the
// copy: the relay finds that the upstream no longer holds its tip, and
// takes the upstream again after the restored consumer's ACK floor. The
// messages the restored upstream stores at sequences the relay had
// passed are not skipped.
func TestRelay_UpstreamRolledBack(t *testing.T) {
	p := startPair(t, time.Minute)
	ch := p.runWatched(t)
	p.publish(t, 0, 100)
	p.holdsIDs(t, 0, 100)
	copy := t.TempDir() + "/copy"
	p.restartUp(t, func(dir string) {
		if out, err := exec.Command("cp", "-a", dir, copy).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	})
	p.publish(t, 100, 200)
	p.holdsIDs(t, 100, 300)
	p.restartUp(t, func(dir string) {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", copy, dir).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	})
	p.publish(t, 300, 100) // at upstream sequences 101..200, which the relay had passed
	p.holdsIDs(t, 300, 400)
	wantChanges(t, ch, hop.UpstreamRolledBack)
}

// Restarts of the upstream that change nothing, and of the relay, are
// not taken for a change: nothing is stored twice.
func TestRelay_UpstreamRestartedIsTheSame(t *testing.T) {
	p := startPair(t, time.Minute)
	var ch changes
	l := p.link()
	l.Changed = ch.add
	p.runWhile(t, l, func() {
		p.publish(t, 0, 200)
		p.holdsIDs(t, 0, 200)
		p.restartUp(t, func(string) {})
		p.publish(t, 200, 100)
		p.holdsIDs(t, 200, 300)
	})
	r2, err := hop.New(l)
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r2)
	p.publish(t, 300, 100)
	exactlyOnce(t, p.settled(t, 400), 400)
	wantChanges(t, &ch)
}

// A relay whose tip the trim removed (jsplan.TipKeep: a link quiet for a
// while) finds no mark downstream, but the upstream's ACK floor holds its
// place: it takes the upstream after it, stores nothing twice, and does
// not take its stream for a new box's.
func TestRelay_TipTrimmed(t *testing.T) {
	p := startPair(t, time.Minute)
	var ch changes
	l := p.link()
	l.Changed = ch.add
	p.runWhile(t, l, func() {
		p.publish(t, 0, 200)
		p.settled(t, 200)
	})
	down, err := p.downJS.Stream(context.Background(), "DOWN")
	if err != nil {
		t.Fatal(err)
	}
	if err := down.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	r2, err := hop.New(l)
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, r2)
	p.publish(t, 200, 100)
	msgs := p.settled(t, 100)
	if len(msgs) != 100 || msgs[0].Header.Get(jetstream.MsgIDHeader) != "id-200" {
		t.Fatalf("downstream holds %d messages from %q, want the 100 new ones", len(msgs), msgs[0].Header.Get(jetstream.MsgIDHeader))
	}
	wantChanges(t, &ch)
}
