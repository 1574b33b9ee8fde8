package edge

// Delivery tests against real servers and real network faults: the
// confirmation of an ACK or a Term that the server never answers (a stalled
// link), that fails (a cut link, a server shutdown and restart), a confirmed
// AckTerm that the server answers, and — end to end through L1, hub and
// edge — DLQ publish failure and poison isolation in a mixed batch.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/faultproxy"
	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/topology"
)

// stallProxy forwards TCP connections like faultproxy, and can also stall:
// the connections stay open but every byte in either direction is dropped,
// as on a link that silently loses packets. The server then never answers
// — and, unlike a cut, the client has nothing to notice, so nothing is
// buffered for a later resend. Heal closes the stalled connections (their
// byte streams are broken) and forwards new ones again.
type stallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	stalled bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

func (p *stallProxy) isStalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

func (p *stallProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.stalled = false
}

func (p *stallProxy) close() {
	p.ln.Close()
	p.heal()
	p.wg.Wait()
}

func (p *stallProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *stallProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c)
		p.track(u)
		p.wg.Add(2)
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isStalled() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// deliveryBase is the configuration the delivery tests share.
func deliveryBase(c *topology.Config) {
	c.Delivery.AckWait = topology.Duration(2 * time.Second)
	c.Delivery.AckConfirmation.Enabled = true
	c.Delivery.AckConfirmation.TimeoutMS = 500
}

func waitSteps(t *testing.T, f *contractSite, seq uint64, want []string) {
	t.Helper()
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if got := stepNames(f.stepsOf(seq)); len(got) < len(want) {
			return fmt.Errorf("steps %v, want %v", got, want)
		}
		return nil
	})
	if got := stepNames(f.stepsOf(seq)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("steps\n got  %v\n want %v", got, want)
	}
}

func waitCounter(t *testing.T, f *contractSite, name string, want float64) {
	t.Helper()
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if got := ctCounterValues(f.metrics)[name]; got != want {
			return fmt.Errorf("%s = %v, want %v", name, got, want)
		}
		return nil
	})
}

// stays checks that cond holds for the whole of d (for facts that can only
// be shown by their absence, such as "never redelivered").
func stays(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := cond(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The server stops answering right after the receipt PubAck: the DoubleAck
// is lost and times out. It is counted as a redelivery-risk event; the
// message comes back after AckWait and is handled as a duplicate: no second
// sink record, no second outbox record, no second receipt.
func TestDelivery_ConfirmationTimeout_RedeliveredAsDuplicate(t *testing.T) {
	t.Parallel()
	var proxy *stallProxy
	f := newContractSite(t, contractOpts{
		configure: deliveryBase,
		dial: func(t *testing.T, srv *server.Server) string {
			proxy = newStallProxy(t, srv.Addr().String())
			return "nats://" + proxy.addr()
		},
		natsOpts: []nats.Option{nats.ReconnectWait(50 * time.Millisecond)},
		onStep: func(f *contractSite, s ctStep) {
			if s.name == "receipt_puback" && s.delivered == 1 {
				proxy.stall()
			}
		},
	})
	seq := f.publish(ctMsg{id: "timeout-1"})[0]
	f.start()

	waitSteps(t, f, seq, at(1, stepsOK, "double_ack"))
	waitCounter(t, f, "ackConfTimeouts", 1)
	// The server never received the ACK: still pending, nothing on the wire.
	if w := f.wireOf(seq, false); len(w) != 0 {
		t.Fatalf("the server received %v through a stalled link", w)
	}
	if ci := f.consumerInfo(); ci.NumAckPending != 1 {
		t.Fatalf("ack pending %d, want 1", ci.NumAckPending)
	}
	ctCounters(t, f.metrics, map[string]float64{"ackConfAttempts": 1, "ackConfSuccesses": 0, "ackConfFailures": 0, "acked": 0, "processed": 0})

	proxy.heal()
	want := cat(at(1, stepsOK, "double_ack"), at(2, "sink_commit", "outbox_commit", "double_ack"))
	waitSteps(t, f, seq, want)
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if ci := f.consumerInfo(); ci.NumAckPending != 0 || ci.AckFloor.Stream != seq {
			return fmt.Errorf("ack pending %d floor %d", ci.NumAckPending, ci.AckFloor.Stream)
		}
		return nil
	})
	ctCounters(t, f.metrics, map[string]float64{"ackConfAttempts": 2, "ackConfSuccesses": 1, "ackConfTimeouts": 1,
		"acked": 1, "redeliveries": 1, "receiptsPublished": 1})
	if n := f.sink.recordsOf("timeout-1"); n != 1 || f.sink.callsOf("timeout-1") != 2 {
		t.Errorf("sink records %d calls %d, want 1 and 2", n, f.sink.callsOf("timeout-1"))
	}
	if st := f.outboxStats(); st.Published != 1 || st.Pending != 0 {
		t.Errorf("outbox %+v", st)
	}
	if n := f.streamMsgCount(ctReceipts); n != 1 {
		t.Errorf("receipts stream holds %d, want 1", n)
	}
	if w := f.wireOf(seq, false); len(w) != 1 || w[0].kind() != "double_ack" || w[0].delivered != 2 {
		t.Errorf("wire %v, want one confirmed ACK of delivery 2", w)
	}
	checkContractInvariants(t, "timeout", f.stepsOf(seq))
}

// The link is cut right after the receipt PubAck, and the client keeps no
// reconnect buffer: the DoubleAck fails at once. Counted as a failure; the
// message is redelivered after the link returns and ACKed as a duplicate.
func TestDelivery_ConfirmationFailure_LinkCut(t *testing.T) {
	t.Parallel()
	var proxy *faultproxy.Proxy
	f := newContractSite(t, contractOpts{
		configure: deliveryBase,
		dial: func(t *testing.T, srv *server.Server) string {
			var err error
			if proxy, err = faultproxy.Listen("127.0.0.1:0", srv.Addr().String()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { proxy.Close() })
			return "nats://" + proxy.Addr()
		},
		natsOpts: []nats.Option{nats.ReconnectWait(50 * time.Millisecond), nats.ReconnectBufSize(-1)},
		onStep: func(f *contractSite, s ctStep) {
			if s.name == "receipt_puback" && s.delivered == 1 {
				proxy.Cut()
				// Let the client notice before it confirms.
				deadline := time.Now().Add(5 * time.Second)
				for f.nc.IsConnected() && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
		},
	})
	seq := f.publish(ctMsg{id: "cut-1"})[0]
	f.start()

	waitSteps(t, f, seq, at(1, stepsOK, "double_ack"))
	waitCounter(t, f, "ackConfFailures", 1)
	ctCounters(t, f.metrics, map[string]float64{"ackConfTimeouts": 0, "ackConfSuccesses": 0, "acked": 0})
	if w := f.wireOf(seq, false); len(w) != 0 {
		t.Fatalf("the server received %v through a cut link", w)
	}
	proxy.Restore()
	waitSteps(t, f, seq, cat(at(1, stepsOK, "double_ack"), at(2, "sink_commit", "outbox_commit", "double_ack")))
	waitCounter(t, f, "ackConfSuccesses", 1)
	if n := f.streamMsgCount(ctReceipts); n != 1 {
		t.Errorf("receipts stream holds %d, want 1", n)
	}
	if st := f.outboxStats(); st.Published != 1 || st.Pending != 0 {
		t.Errorf("outbox %+v", st)
	}
}

// The server shuts down right after the receipt PubAck and comes back on
// the same store: the confirmation fails, the restarted server redelivers
// the message, and it is handled as a duplicate.
func TestDelivery_ConfirmationFailure_ServerRestart(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	f := newContractSite(t, contractOpts{
		configure: deliveryBase,
		dial:      func(t *testing.T, srv *server.Server) string { return srv.ClientURL() },
		natsOpts:  []nats.Option{nats.ReconnectWait(50 * time.Millisecond), nats.ReconnectBufSize(-1)},
		onStep: func(f *contractSite, s ctStep) {
			if s.name == "receipt_puback" && s.delivered == 1 {
				f.srv.Shutdown()
				f.srv.WaitForShutdown()
				down.Store(true)
				deadline := time.Now().Add(5 * time.Second)
				for f.nc.IsConnected() && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
		},
	})
	seq := f.publish(ctMsg{id: "restart-1"})[0]
	port := f.srv.Addr().(*net.TCPAddr).Port
	f.start()

	waitSteps(t, f, seq, at(1, stepsOK, "double_ack"))
	if !down.Load() {
		t.Fatal("server was not shut down")
	}
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		m := ctCounterValues(f.metrics)
		if m["ackConfFailures"]+m["ackConfTimeouts"] != 1 || m["ackConfSuccesses"] != 0 {
			return fmt.Errorf("confirmation counters %v", m)
		}
		return nil
	})
	startContractServer(t, f.storeDir, port)
	waitSteps(t, f, seq, cat(at(1, stepsOK, "double_ack"), at(2, "sink_commit", "outbox_commit", "double_ack")))
	waitCounter(t, f, "ackConfSuccesses", 1)
	if n := f.streamMsgCount(ctReceipts); n != 1 {
		t.Errorf("receipts stream holds %d, want 1", n)
	}
	if n := f.sink.recordsOf("restart-1"); n != 1 {
		t.Errorf("sink records %d", n)
	}
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if ci := f.consumerInfo(); ci.NumAckPending != 0 || ci.AckFloor.Stream != seq {
			return fmt.Errorf("ack pending %d floor %d", ci.NumAckPending, ci.AckFloor.Stream)
		}
		return nil
	})
}

// A confirmed AckTerm that the server answers: counted as a success, and the
// message is never redelivered — not after several AckWaits.
func TestDelivery_ConfirmedAckTerm_NeverRedelivered(t *testing.T) {
	t.Parallel()
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) {
			deliveryBase(c)
			c.Delivery.AckWait = topology.Duration(time.Second)
			c.DeadLetter.Enabled, c.DeadLetter.AckTermAfterPub = true, true
		},
		script: map[string][]sinkOutcome{"term-1": {sinkPerm}},
	})
	seqs := f.publish(ctMsg{id: "term-1"}, ctMsg{id: "ok-1"})
	f.start()
	waitSteps(t, f, seqs[0], at(1, stepsDLQ, "confirmed_term"))
	waitSteps(t, f, seqs[1], at(1, stepsOK, "double_ack"))
	waitCounter(t, f, "ackConfSuccesses", 2)
	check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
		if n := f.advisoriesFor("MSG_TERMINATED", seqs[0]); n != 1 {
			return fmt.Errorf("%d Term advisories", n)
		}
		return nil
	})
	if w := f.wireOf(seqs[0], false); len(w) != 1 || w[0].kind() != "confirmed_term" {
		t.Fatalf("wire %v, want one +TERM sent as a request", w)
	}
	stays(t, 2500*time.Millisecond, func() error {
		if ss := f.stepsOf(seqs[0]); len(ss) != len(stepsDLQ)+1 {
			return fmt.Errorf("terminated message came back: %v", stepNames(ss))
		}
		if ci := f.consumerInfo(); ci.NumAckPending != 0 || ci.NumRedelivered != 0 || ci.AckFloor.Stream != seqs[1] {
			return fmt.Errorf("consumer ack pending %d redelivered %d floor %d", ci.NumAckPending, ci.NumRedelivered, ci.AckFloor.Stream)
		}
		return nil
	})
	ctCounters(t, f.metrics, map[string]float64{"terminated": 1, "acked": 1, "ackConfAttempts": 2, "ackConfTimeouts": 0,
		"ackConfFailures": 0, "ackConfUnsupported": 0, "deadLettered": 1})
	if recs := f.dlqRecords(); len(recs) != 1 {
		t.Errorf("DLQ records %d", len(recs))
	}
}

// A confirmed AckTerm that the server never answers (stalled link): counted
// as a timeout; the redelivered message is dead-lettered again without a
// second DLQ record or receipt, and terminated with confirmation.
func TestDelivery_ConfirmedAckTerm_Timeout(t *testing.T) {
	t.Parallel()
	var proxy *stallProxy
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) {
			deliveryBase(c)
			c.DeadLetter.Enabled, c.DeadLetter.AckTermAfterPub = true, true
		},
		script: map[string][]sinkOutcome{"tt-1": {sinkPerm}},
		dial: func(t *testing.T, srv *server.Server) string {
			proxy = newStallProxy(t, srv.Addr().String())
			return "nats://" + proxy.addr()
		},
		natsOpts: []nats.Option{nats.ReconnectWait(50 * time.Millisecond)},
		onStep: func(f *contractSite, s ctStep) {
			if s.name == "receipt_puback" && s.delivered == 1 {
				proxy.stall()
			}
		},
	})
	seq := f.publish(ctMsg{id: "tt-1"})[0]
	f.start()
	waitSteps(t, f, seq, at(1, stepsDLQ, "confirmed_term"))
	waitCounter(t, f, "ackConfTimeouts", 1)
	ctCounters(t, f.metrics, map[string]float64{"terminated": 0})
	proxy.heal()
	waitSteps(t, f, seq, cat(at(1, stepsDLQ, "confirmed_term"), at(2, "dlq_publish", "dlq_puback", "outbox_commit", "confirmed_term")))
	waitCounter(t, f, "ackConfSuccesses", 1)
	check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
		if n := f.advisoriesFor("MSG_TERMINATED", seq); n != 1 {
			return fmt.Errorf("%d Term advisories", n)
		}
		return nil
	})
	if recs := f.dlqRecords(); len(recs) != 1 || recs[0].Delivered != 1 {
		t.Errorf("DLQ %+v, want the one record of delivery 1", recs)
	}
	if n := f.streamMsgCount(ctReceipts); n != 1 {
		t.Errorf("receipts %d", n)
	}
	ctCounters(t, f.metrics, map[string]float64{"terminated": 1, "deadLettered": 1, "ackConfAttempts": 2})
}

// ---------------------------------------------------------------------------
// End to end: L1 → hub → edge with the real App.

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

func completionStatus(t *testing.T, ls *LocalSystem, id string) (receipt.Status, bool) {
	c, err := completionsOf(ls.App("l1")).State().Get(context.Background(), id)
	if errors.Is(err, record.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	p, ok := c.Processors["edge1"]
	return p.Status, ok
}

// One poison message in a mixed batch: only it is dead-lettered (and
// reported to L1 as dead_lettered); the others complete; a message without
// an event_id is dead-lettered without a receipt; nothing is terminated
// but the poison.
func TestDelivery_PoisonIsolation_EndToEnd(t *testing.T) {
	tr := &appTrace{}
	gate := make(chan struct{})
	ls := testSystem(t, LocalOptions{Configure: func(c *topology.Config) {
		if c.Site != "edge1" {
			return
		}
		c.DeadLetter.Enabled, c.DeadLetter.AckTermAfterPub = true, true
		c.Delivery.AckConfirmation.Enabled = true
		c.Delivery.MaxMessageBytes = 256
	}}, edge1Options(WithRunnerHooks(runner.Hooks{Trace: tr.record, Gate: gate})))
	js := clientJS(t, ls.App("l1").ClientURL())
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
	ejs := clientJS(t, edge.ClientURL())
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
	m := edgeOf(edge).metrics
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if v := counterValue(t, m.terminated); v != 2 {
			return fmt.Errorf("terminated %v, want 2", v)
		}
		if v := counterValue(t, m.ackConfSuccesses); v != 12 {
			return fmt.Errorf("confirmations %v, want 12", v)
		}
		if v := completionsOf(ls.App("l1")).Stats().Applied; v != 11 {
			return fmt.Errorf("L1 applied %d, want 11 (10 processed, 1 dead_lettered)", v)
		}
		return nil
	})
}

// The edge's DLQ stream is full: the poison message is held (no ACK, no
// Term, never reported to L1) while the good ones complete; once the stream
// has room it is dead-lettered once and L1 learns it.
func TestDelivery_DLQPublishFailure_EndToEnd(t *testing.T) {
	tr := &appTrace{}
	ls := testSystem(t, LocalOptions{Configure: func(c *topology.Config) {
		if c.Site != "edge1" {
			return
		}
		c.DeadLetter.Enabled, c.DeadLetter.AckTermAfterPub = true, true
		c.Delivery.MaxMessageBytes = 256
		c.Delivery.Retry.Mode, c.Delivery.Retry.Jitter = "fixed", "none"
		c.Delivery.Retry.BackoffMS, c.Delivery.Retry.BackoffMaxMS = 200, 200
	}}, edge1Options(WithRunnerHooks(runner.Hooks{Trace: tr.record})))
	edge := ls.App("edge1")
	ejs := clientJS(t, edge.ClientURL())
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

	js := clientJS(t, ls.App("l1").ClientURL())
	publishAt(t, js, "held-big", []byte(strings.Repeat("h", 1024)))
	publishAt(t, js, "fine-1", []byte(`{}`))
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if st, ok := completionStatus(t, ls, "fine-1"); !ok || st != receipt.StatusProcessed {
			return errors.New("fine-1 not processed at L1")
		}
		if n := counterValue(t, edgeOf(edge).metrics.dlqPublishErrors); n < 3 {
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
	if n := counterValue(t, edgeOf(edge).metrics.terminated); n != 0 {
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
		if v := completionsOf(ls.App("l1")).Stats().Applied; v != 2 {
			return fmt.Errorf("L1 applied %d, want 2", v)
		}
		return nil
	})
}
