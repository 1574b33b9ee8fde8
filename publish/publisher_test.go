package publish

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
)

func startJS(t testing.TB) (*server.Server, jetstream.JetStream) {
	t.Helper()
	return jstest.StartJS(t, jstest.Options{})
}

func createOrigin(t testing.TB, js jetstream.JetStream, atomic bool) {
	t.Helper()
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "L1A", Subjects: []string{"events.>"}, Storage: jetstream.FileStorage, AllowAtomicPublish: atomic,
	})
	if err != nil {
		t.Fatal(err)
	}
}

func events(n int, prefix string) []Event {
	evs := make([]Event, n)
	for i := range evs {
		evs[i] = Event{ID: fmt.Sprintf("%s-%04d", prefix, i), Subject: "events.a", Data: []byte("x")}
	}
	return evs
}

func newPublisher(t testing.TB, js jetstream.JetStream, batch int) *Publisher {
	t.Helper()
	p, err := New(Config{JS: js, Stream: "L1A", Batch: batch, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func streamMsgs(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), "L1A")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestPublish_BatchThenRetry: events go in atomic batches; publishing the
// same events again (what a retry after a lost answer does) stores nothing
// twice and reports each as a duplicate.
func TestPublish_BatchThenRetry(t *testing.T) {
	_, js := startJS(t)
	createOrigin(t, js, true)
	p := newPublisher(t, js, 16)
	evs := events(40, "a")
	res, err := p.Publish(context.Background(), evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.ID != evs[i].ID || !r.Batched || r.Duplicate || r.Seq != uint64(i+1) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	res, err = p.Publish(context.Background(), evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.ID != evs[i].ID || !r.Duplicate {
			t.Fatalf("repeat %d: %+v; want a duplicate", i, r)
		}
	}
	if n := streamMsgs(t, js); n != 40 {
		t.Fatalf("stream holds %d messages, want 40", n)
	}
}

// TestPublish_RepeatedIDInBatch: an event_id twice in one batch is stored
// once; the batch is refused whole and published one by one.
func TestPublish_RepeatedIDInBatch(t *testing.T) {
	_, js := startJS(t)
	createOrigin(t, js, true)
	evs := events(5, "b")
	evs = append(evs, evs[2])
	res, err := newPublisher(t, js, 0).Publish(context.Background(), evs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 || !res[5].Duplicate || res[2].Duplicate {
		t.Fatalf("results %+v", res)
	}
	if n := streamMsgs(t, js); n != 5 {
		t.Fatalf("stream holds %d messages, want 5", n)
	}
}

// TestPublish_NoAtomicStream: a stream without atomic publish still gets
// every event, one publish each.
func TestPublish_NoAtomicStream(t *testing.T) {
	_, js := startJS(t)
	createOrigin(t, js, false)
	res, err := newPublisher(t, js, 0).Publish(context.Background(), events(10, "c"))
	if err != nil || len(res) != 10 || res[0].Batched {
		t.Fatalf("results %+v, %v", res, err)
	}
	if n := streamMsgs(t, js); n != 10 {
		t.Fatalf("stream holds %d messages, want 10", n)
	}
}

// TestPublish_ReportsNotStored: events the origin stream would not store
// (another subject) fail their batch; the error names exactly the events
// not stored, and those of earlier batches are reported stored.
func TestPublish_ReportsNotStored(t *testing.T) {
	_, js := startJS(t)
	createOrigin(t, js, true)
	evs := events(8, "d")
	for i := 4; i < 8; i++ {
		evs[i].Subject = "other.x"
	}
	// No stream takes other.x: no responders, for good; a short
	// RetryFor reports it soon.
	p, err := New(Config{JS: js, Stream: "L1A", Batch: 4, Attempts: 1, Timeout: time.Second, RetryFor: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Publish(context.Background(), evs)
	var ns *NotStoredError
	if !errors.As(err, &ns) || !errors.Is(err, ErrNotStored) {
		t.Fatalf("err %v; want a NotStoredError", err)
	}
	if want := []string{"d-0004", "d-0005", "d-0006", "d-0007"}; !slices.Equal(ns.IDs, want) {
		t.Fatalf("not stored %v, want %v", ns.IDs, want)
	}
	if len(res) != 4 || streamMsgs(t, js) != 4 {
		t.Fatalf("results %+v; stream %d", res, streamMsgs(t, js))
	}
	if _, err := New(Config{Batch: MaxBatch + 1}); err == nil {
		t.Fatal("New accepted a config without JS and Stream, with too large a batch")
	}
}

// Every event carries its publish time, for the edge's expiry; one that
// brings its own keeps it.
func TestPublish_StampsPublishedAt(t *testing.T) {
	_, js := startJS(t)
	createOrigin(t, js, true)
	p := newPublisher(t, js, 16)
	evs := events(2, "t")
	own := "2026-01-02T03:04:05Z"
	evs[1].Header = nats.Header{PublishedAtHeader: []string{own}}
	before := time.Now().Add(-time.Second)
	if _, err := p.Publish(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), "L1A")
	if err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[uint64]string{1: "", 2: own} {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		got := m.Header.Get(PublishedAtHeader)
		if want != "" {
			if got != want {
				t.Errorf("seq %d: %s %q, want its own %q", seq, PublishedAtHeader, got, want)
			}
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, got)
		if err != nil || at.Before(before) || at.After(time.Now()) {
			t.Errorf("seq %d: %s %q (%v), want the publish time", seq, PublishedAtHeader, got, err)
		}
	}
}

// TestPublish_WaitsForTheStream: a stream that does not answer yet (no
// responders: a node restarting, a cluster electing its leader) is waited
// for within RetryFor, and every event is then stored once.
func TestPublish_WaitsForTheStream(t *testing.T) {
	_, js := startJS(t)
	p, err := New(Config{JS: js, Stream: "L1A", Batch: 4, RetryFor: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	time.AfterFunc(time.Second, func() {
		_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
			Name: "L1A", Subjects: []string{"events.>"}, Storage: jetstream.FileStorage, AllowAtomicPublish: true,
		})
		created <- err
	})
	res, err := p.Publish(context.Background(), events(10, "w"))
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if err != nil || len(res) != 10 {
		t.Fatalf("Publish: %d results, %v", len(res), err)
	}
	if p.Retries() == 0 {
		t.Fatal("no retry counted, though the stream came a second late")
	}
	if n := streamMsgs(t, js); n != 10 {
		t.Fatalf("stream holds %d messages, want 10", n)
	}
}

// TestPublish_RidesThroughLeaderLoss: the origin stream's leader node of
// a 3-node cluster is shut down while batches are published; Publish
// reports no error, and the stream holds each event once.
func TestPublish_RidesThroughLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster; skipped with -short")
	}
	servers := jstest.StartCluster(t)
	js, err := jetstream.New(jstest.ClusterConn(t, servers, 0))
	if err != nil {
		t.Fatal(err)
	}
	var s jetstream.Stream
	check.For(t, 30*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "L1A", Subjects: []string{"events.>"},
			Storage: jetstream.FileStorage, Replicas: 3, AllowAtomicPublish: true})
		return err
	})
	p, err := New(Config{JS: js, Stream: "L1A", Batch: 100})
	if err != nil {
		t.Fatal(err)
	}
	const batches, per = 40, 100
	for b := range batches {
		if b == batches/4 {
			info, err := s.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, srv := range servers {
				if srv.Name() == info.Cluster.Leader {
					srv.Shutdown()
				}
			}
		}
		if _, err := p.Publish(context.Background(), events(per, fmt.Sprintf("c%02d", b))); err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
	}
	check.For(t, 30*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != batches*per {
			return fmt.Errorf("stream holds %d messages, want %d", info.State.Msgs, batches*per)
		}
		return nil
	})
	t.Logf("retries through the election: %d", p.Retries())
}

// TestPublish_FullStreamWaitsForRoom: a full stream (DiscardNew at its
// limit) is waited for while room comes back (here a consumer of the
// stream deletes what it has read, as L1's cleanup does), and reported,
// naming the refusal, once RetryFor has passed without room.
func TestPublish_FullStreamWaitsForRoom(t *testing.T) {
	_, js := startJS(t)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "L1A", Subjects: []string{"events.>"},
		Storage: jetstream.FileStorage, AllowAtomicPublish: true, MaxMsgs: 20, Discard: jetstream.DiscardNew})
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{1, 10} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			if err := st.Purge(ctx); err != nil {
				t.Fatal(err)
			}
			p, err := New(Config{JS: js, Stream: "L1A", Batch: batch, RetryFor: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			// The room comes back a little at a time, well after the
			// stream first refused.
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(300 * time.Millisecond):
					}
					info, err := st.Info(ctx)
					if err != nil || info.State.Msgs < 15 {
						continue
					}
					_ = st.Purge(ctx, jetstream.WithPurgeKeep(5))
				}
			}()
			_, err = p.Publish(ctx, events(100, fmt.Sprintf("w%d", batch)))
			close(stop)
			<-done
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			if p.Retries() == 0 {
				t.Fatal("no retry: the stream was never full")
			}
		})
	}
	// Nobody makes room: refused, naming why, after RetryFor.
	p, err := New(Config{JS: js, Stream: "L1A", Batch: 10, RetryFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = p.Publish(ctx, events(100, "stuck"))
	if !errors.Is(err, ErrNotStored) || !strings.Contains(err.Error(), "maximum messages exceeded") || !Full(err) {
		t.Fatalf("%v; want the full stream's refusal", err)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("refused after %s, before RetryFor", d)
	}
}
