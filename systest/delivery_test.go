package systest

// Delivery tests against real servers and real network faults: the
// confirmation of an ACK or a Term that the server never answers (a stalled
// link), that fails (a cut link, a server shutdown and restart), a confirmed
// AckTerm that the server answers, and — end to end through L1, hub and
// edge — DLQ publish failure and poison isolation in a mixed batch.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/topology"
)

// The edge's DLQ stream is full: the poison message is held (no ACK, no
// Term, never reported to L1) while the good ones complete; once the stream
// has room it is dead-lettered once and L1 learns it.
func TestDelivery_DLQPublishFailure_EndToEnd(t *testing.T) {
	tr := &appTrace{}
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		if c.Site != "edge1" {
			return
		}
		c.DeadLetter.Enabled, c.DeadLetter.AckTermAfterPub = true, true
		c.Delivery.MaxMessageBytes = 256
		c.Delivery.Retry.Mode, c.Delivery.Retry.Jitter = "fixed", "none"
		c.Delivery.Retry.BackoffMS, c.Delivery.Retry.BackoffMaxMS = 200, 200
	}}, edge1Options(edge.WithRunnerHooks(runner.Hooks{Trace: tr.record})))
	edge := ls.App("edge1")
	ejs := jstest.ConnectURL(t, edge.ClientURL())
	ctx := context.Background()
	dlq, err := ejs.Stream(ctx, "DLQ")
	if err != nil {
		t.Fatal(err)
	}
	full := dlq.CachedInfo().Config
	full.MaxMsgs = 1
	if _, err := ejs.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	fill := nats.NewMsg("leafline.dlq.edge1")
	fill.Data = []byte("filler")
	if _, err := ejs.PublishMsg(ctx, fill); err != nil {
		t.Fatal(err)
	}

	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	publishAt(t, js, "held-big", []byte(strings.Repeat("h", 1024)))
	publishAt(t, js, "fine-1", []byte(`{}`))
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if st, ok := completionStatus(t, ls, "fine-1"); !ok || st != receipt.StatusProcessed {
			return errors.New("fine-1 not processed at L1")
		}
		if n := metricOf(t, edge, "leafline_dlq_publish_errors_total", nil); n < 3 {
			return fmt.Errorf("dlq publish errors %v", n)
		}
		return nil
	})
	for _, s := range tr.of("held-big") {
		if s != "dlq_publish" && s != "nak" {
			t.Fatalf("held message took step %q while the DLQ is full: %v", s, tr.of("held-big"))
		}
	}
	if _, ok := completionStatus(t, ls, "held-big"); ok {
		t.Fatal("L1 knows the held event although its DLQ record was never PubAck'ed")
	}
	if n := metricOf(t, edge, "leafline_messages_terminated_total", nil); n != 0 {
		t.Fatalf("terminated %v while the DLQ is full", n)
	}

	full.MaxMsgs = -1
	if _, err := ejs.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if st, ok := completionStatus(t, ls, "held-big"); !ok || st != receipt.StatusDeadLettered {
			return fmt.Errorf("held-big at L1: %q", st)
		}
		return nil
	})
	steps := tr.of("held-big")
	if tail := strings.Join(steps[len(steps)-len(stepsDLQ)-1:], " "); tail != strings.Join(append(append([]string{}, stepsDLQ...), "term"), " ") {
		t.Errorf("held-big: %v", steps)
	}
	if n := localsys.StreamState(ctx, ejs, "DLQ").Msgs; n != 2 {
		t.Errorf("DLQ holds %d, want filler + 1", n)
	}
	// The record is visible in the KV a moment before the service counts
	// its application.
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if v := leafline.Completions(ls.App("l1")).Stats().Applied; v != 2 {
			return fmt.Errorf("L1 applied %d, want 2", v)
		}
		return nil
	})
}

// One poison message in a mixed batch: only it is dead-lettered (and
// reported to L1 as dead_lettered); the others complete; a message without
// an event_id is dead-lettered without a receipt; nothing is terminated
// but the poison.
func TestDelivery_PoisonIsolation_EndToEnd(t *testing.T) {
	tr := &appTrace{}
	gate := make(chan struct{})
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		if c.Site != "edge1" {
			return
		}
		c.DeadLetter.Enabled, c.DeadLetter.AckTermAfterPub = true, true
		c.Delivery.AckConfirmation.Enabled = true
		c.Delivery.MaxMessageBytes = 256
	}}, edge1Options(edge.WithRunnerHooks(runner.Hooks{Trace: tr.record, Gate: gate})))
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	var good []string
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("good-%d", i)
		good = append(good, id)
		publishAt(t, js, id, []byte(`{"k":1}`))
		if i == 4 {
			publishAt(t, js, "poison-big", []byte(strings.Repeat("p", 1024)))
			publishAt(t, js, "", []byte(`{"no":"id"}`))
		}
	}
	edge := ls.App("edge1")
	ejs := jstest.ConnectURL(t, edge.ClientURL())
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n := localsys.StreamState(context.Background(), ejs, "L2A").LastSeq; n != 12 {
			return fmt.Errorf("L2A has %d of 12", n)
		}
		return nil
	})
	close(gate) // one batch of 12
	check.For(t, 60*time.Second, 50*time.Millisecond, func() error {
		for _, id := range good {
			if st, ok := completionStatus(t, ls, id); !ok || st != receipt.StatusProcessed {
				return fmt.Errorf("%s at L1: %q", id, st)
			}
		}
		if st, ok := completionStatus(t, ls, "poison-big"); !ok || st != receipt.StatusDeadLettered {
			return fmt.Errorf("poison at L1: %q", st)
		}
		return nil
	})
	okSteps := strings.Join(append(append([]string{}, stepsOK...), "double_ack"), " ")
	for _, id := range good {
		if got := strings.Join(tr.of(id), " "); got != okSteps {
			t.Errorf("%s: %s, want %s", id, got, okSteps)
		}
	}
	if got, want := strings.Join(tr.of("poison-big"), " "), strings.Join(append(append([]string{}, stepsDLQ...), "confirmed_term"), " "); got != want {
		t.Errorf("poison: %s, want %s", got, want)
	}
	if got, want := strings.Join(tr.of(""), " "), "dlq_publish dlq_puback confirmed_term"; got != want {
		t.Errorf("no event_id: %s, want %s", got, want)
	}
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		ci, err := ejs.Consumer(context.Background(), "L2A", "leafline-sink")
		if err != nil {
			return err
		}
		if info := ci.CachedInfo(); info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
			return fmt.Errorf("ack pending %d pending %d redelivered %d", info.NumAckPending, info.NumPending, info.NumRedelivered)
		}
		return nil
	})
	if n := localsys.StreamState(context.Background(), ejs, "DLQ").Msgs; n != 2 {
		t.Errorf("DLQ holds %d, want 2", n)
	}
	// L1 can see a receipt before the edge has sent (and counted) the
	// final ACK or Term that follows its PubAck, so the counters are polled.
	m := edge
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if v := metricOf(t, m, "leafline_messages_terminated_total", nil); v != 2 {
			return fmt.Errorf("terminated %v, want 2", v)
		}
		if v := metricOf(t, m, "leafline_ack_confirmation_successes_total", nil); v != 12 {
			return fmt.Errorf("confirmations %v, want 12", v)
		}
		if v := leafline.Completions(ls.App("l1")).Stats().Applied; v != 11 {
			return fmt.Errorf("L1 applied %d, want 11 (10 processed, 1 dead_lettered)", v)
		}
		return nil
	})
}

func completionStatus(t *testing.T, ls *System, id string) (receipt.Status, bool) {
	c, err := leafline.Completions(ls.App("l1")).State().Get(context.Background(), id)
	if errors.Is(err, record.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	p, ok := c.Processors["edge1"]
	return p.Status, ok
}

// The runner's trace of an event processed and of one dead-lettered, up
// to its ACK (the edge's delivery contract).
var (
	stepsOK  = []string{"sink_commit", "outbox_commit", "receipt_publish", "receipt_puback"}
	stepsDLQ = []string{"dlq_publish", "dlq_puback", "outbox_commit", "receipt_publish", "receipt_puback"}
)

// appTrace records the App's runner steps by event_id.
type appTrace struct {
	mu    sync.Mutex
	steps map[string][]string
	// onStep runs on the runner's goroutine.
	onStep func(step, eventID string)
}

func (a *appTrace) record(step, id string, _ *jetstream.MsgMetadata) {
	a.mu.Lock()
	if a.steps == nil {
		a.steps = map[string][]string{}
	}
	a.steps[id] = append(a.steps[id], step)
	fn := a.onStep
	a.mu.Unlock()
	if fn != nil {
		fn(step, id)
	}
}

func (a *appTrace) of(id string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.steps[id]...)
}

func publishAt(t *testing.T, js jetstream.JetStream, id string, data []byte) {
	t.Helper()
	m := nats.NewMsg("events.test")
	if id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	m.Data = data
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}
