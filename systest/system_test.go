package systest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/outbox/outboxtest"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/topology"
)

// testSystem starts a System with every box running and the links up.
func testSystem(t *testing.T, o Options, opts func(site string) []edge.Option) *System {
	t.Helper()
	return testSystemWith(t, o, func(site string) leafline.Options {
		if opts == nil {
			return leafline.Options{}
		}
		return leafline.Options{Edge: opts(site)}
	})
}

// testSystemWith is testSystem with all of each site's options.
func testSystemWith(t *testing.T, o Options, opts func(site string) leafline.Options) *System {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	ls, err := NewWith(t.TempDir(), o, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ls.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	waitLinks(t, ls)
	return ls
}

func waitLinks(t *testing.T, ls *System) {
	t.Helper()
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		for _, s := range ls.Topology.Sites {
			if s.Upstream != "" && !ls.App(s.Name).UpstreamConnected() {
				return fmt.Errorf("%s not connected upstream", s.Name)
			}
		}
		return nil
	})
}

func publishN(t *testing.T, js jetstream.JetStream, prefix string, n int) []string {
	t.Helper()
	return publishData(t, js, prefix, n, []byte(`{"k":1}`))
}

// publishData publishes n events with that payload and returns their ids.
func publishData(t *testing.T, js jetstream.JetStream, prefix string, n int, data []byte) []string {
	t.Helper()
	var ids []string
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The test ids deliberately include characters that are not valid KV
	// key characters.
	for i := 0; i < n; i++ {
		ids = append(ids, fmt.Sprintf("%s.%d *x>", prefix, i))
	}
	for i, id := range ids {
		m := nats.NewMsg("events.test")
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Data = data
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
		if (i+1)%1000 != 0 && i < len(ids)-1 {
			continue
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("publishes not acked")
		}
	}
	return ids
}

// waitCompleted waits until every id has a processed record from each of
// the processors, and checks that no receipt was applied twice.
func waitCompleted(t *testing.T, ls *System, ids []string, processors ...string) {
	t.Helper()
	svc := leafline.Completions(ls.App("l1"))
	want := uint64(len(ids) * len(processors))
	check.For(t, 90*time.Second, 50*time.Millisecond, func() error {
		if got := svc.Stats().Applied; got < want {
			return fmt.Errorf("applied %d of %d; %s", got, want, pathState(ls))
		}
		return nil
	})
	ctx := context.Background()
	for _, id := range ids {
		c, err := svc.State().Get(ctx, id)
		if err != nil {
			t.Fatalf("event %q: %v", id, err)
		}
		if c.EventID != id {
			t.Fatalf("event %q: record holds id %q", id, c.EventID)
		}
		for _, p := range processors {
			if pr, ok := c.Processors[p]; !ok || pr.Status != receipt.StatusProcessed {
				t.Fatalf("event %q: processor %s: %+v", id, p, c.Processors)
			}
		}
	}
	if got := svc.Stats().Applied; got != want {
		t.Fatalf("applied %d receipts for %d (event, processor) pairs: a receipt was applied twice", got, want)
	}
}

func TestSystem_EndToEnd(t *testing.T) {
	ls := testSystem(t, Options{}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, js, "e2e", 500)
	waitCompleted(t, ls, ids, "edge1")
	// Every source message was ACKed: nothing pending on the sink consumer.
	ejs := jstest.ConnectURL(t, ls.App("edge1").ClientURL())
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		ci, err := ejs.Consumer(context.Background(), "L2A", "leafline-sink")
		if err != nil {
			return err
		}
		info := ci.CachedInfo()
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("ack pending %d, pending %d", info.NumAckPending, info.NumPending)
		}
		return nil
	})
}

func TestSystem_TwoEdges(t *testing.T) {
	ls := testSystem(t, Options{Edges: 2}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, js, "two", 200)
	waitCompleted(t, ls, ids, "edge1", "edge2")
}

// When the receipt publish fails, the source message must not be ACKed; it
// is redelivered and completes exactly once.
func TestRunner_ReceiptPublishFails_NoAckThenExactlyOnce(t *testing.T) {
	fp := &outboxtest.FailingPublisher{}
	fp.Fails.Store(3)
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		c.Delivery.Retry.BackoffMS = 100
		c.Delivery.Retry.BackoffMaxMS = 200
		// Keep the relay out of the way so that the runner's redelivery
		// path is what completes the event.
		c.Outbox.RelayInterval = topology.Duration(time.Hour)
	}}, edge1Options(edge.WithRunnerHooks(runner.Hooks{WrapPublisher: func(p outbox.Publisher) outbox.Publisher { fp.Next = p; return fp }})))
	edge := ls.App("edge1")
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, js, "pubfail", 1)
	waitCompleted(t, ls, ids, "edge1")
	if fp.Calls.Load() < 4 {
		t.Fatalf("publisher called %d times, want >= 4 (3 failures then success)", fp.Calls.Load())
	}
	m := edge
	if got := metricOf(t, m, "leafline_messages_nacked_total", nil); got < 3 {
		t.Fatalf("nacked %v, want >= 3: a failed receipt publish must not ACK", got)
	}
	if got := metricOf(t, m, "leafline_messages_acked_total", nil); got != 1 {
		t.Fatalf("acked %v, want exactly 1", got)
	}
	if got := metricOf(t, m, "leafline_redeliveries_total", nil); got < 3 {
		t.Fatalf("redeliveries %v, want >= 3", got)
	}
}

// An abrupt stop of the edge mid-stream, then a restart on the same data
// dir: every event completes exactly once.
func TestSystem_EdgeKilledMidStream(t *testing.T) {
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		c.Delivery.BatchSize = 16
	}}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, js, "kill", 2000)
	edge := ls.App("edge1")
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n := metricOf(t, edge, "leafline_messages_acked_total", nil); n < 100 {
			return fmt.Errorf("acked %v", n)
		}
		return nil
	})
	ls.Kill("edge1")
	if _, err := ls.Start(context.Background(), "edge1"); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, ls, ids, "edge1")
}

// With the edge↔hub link cut, the edge goes on processing the events it
// already has and its receipts pile up locally; after the link returns
// everything drains, nothing lost or applied twice.
func TestSystem_LinkCut(t *testing.T) {
	ls := testSystem(t, Options{}, nil)
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	edge := ls.App("edge1")
	ejs := jstest.ConnectURL(t, edge.ClientURL())
	ctx := context.Background()

	first := publishN(t, l1js, "before", 300)
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n := localsys.StreamState(ctx, ejs, "L2A").LastSeq; n < 300 {
			return fmt.Errorf("L2A has received %d", n)
		}
		return nil
	})
	ls.Links["edge1"].Cut()
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if edge.UpstreamConnected() {
			return errors.New("edge still connected")
		}
		return nil
	})
	second := publishN(t, l1js, "during", 300)
	// The edge processes everything it has while cut: 300 receipts held
	// locally in RE (the hub cannot take them).
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n := receiptsIn(ctx, ejs, "RE"); n < 300 {
			return fmt.Errorf("RE holds %d receipts", n)
		}
		return nil
	})
	if n := localsys.StreamState(ctx, ejs, "L2A").LastSeq; n != 300 {
		t.Fatalf("L2A has received %d events by the end of the cut, want 300", n)
	}
	ls.Links["edge1"].Restore()
	waitCompleted(t, ls, append(first, second...), "edge1")
}

func counterValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// pathState describes every stream and consumer on the event and receipt
// paths, for a failure message that says which hop stopped.
func pathState(ls *System) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, site := range ls.Topology.Sites {
		a := ls.App(site.Name)
		if a == nil || a.Server() == nil {
			continue
		}
		nc, err := nats.Connect(a.ClientURL())
		if err != nil {
			fmt.Fprintf(&b, "[%s: %v] ", site.Name, err)
			continue
		}
		js, _ := jetstream.New(nc)
		for name := range js.StreamNames(ctx).Name() {
			st, err := js.Stream(ctx, name)
			if err != nil {
				continue
			}
			i := st.CachedInfo()
			fmt.Fprintf(&b, "[%s %s last=%d", site.Name, name, i.State.LastSeq)
			for _, src := range i.Sources {
				fmt.Fprintf(&b, " src %s lag=%d active=%s err=%v", src.Name, src.Lag, src.Active, src.Error)
			}
			for ci := range st.ListConsumers(ctx).Info() {
				fmt.Fprintf(&b, " cons %s dlv=%d ackflr=%d ackpend=%d pend=%d redlv=%d", ci.Name, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumAckPending, ci.NumPending, ci.NumRedelivered)
			}
			b.WriteString("] ")
		}
		nc.Close()
	}
	return b.String()
}

// receiptsIn counts the receipts a receipts stream holds, alone or in
// bundles (-1 when the stream cannot be read).
func receiptsIn(ctx context.Context, js jetstream.JetStream, stream string) int {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return -1
	}
	st := s.CachedInfo().State
	n := 0
	for seq := st.FirstSeq; seq <= st.LastSeq && st.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return -1
		}
		raws, err := receipt.Unbundle(m.Data, m.Header)
		if err != nil {
			return -1
		}
		n += len(raws)
	}
	return n
}
