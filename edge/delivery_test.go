package edge

// Delivery tests against real servers and real network faults: the
// confirmation of an ACK or a Term that the server never answers (a stalled
// link), that fails (a cut link, a server shutdown and restart), a confirmed
// AckTerm that the server answers, and — end to end through L1, hub and
// edge — DLQ publish failure and poison isolation in a mixed batch.

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/faultproxy"
	"github.com/leafline/leafline/internal/faultproxy/faultproxytest"

	"github.com/leafline/leafline/topology"
)

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

// The server stops answering right after the receipt PubAck: the DoubleAck
// is lost and times out. It is counted as a redelivery-risk event; the
// message comes back after AckWait and is handled as a duplicate: no second
// sink record, no second outbox record, no second receipt.
func TestDelivery_ConfirmationTimeout_RedeliveredAsDuplicate(t *testing.T) {
	t.Parallel()
	var proxy *faultproxy.Proxy
	f := newContractSite(t, contractOpts{
		configure: deliveryBase,
		dial: func(t *testing.T, srv *server.Server) string {
			proxy = faultproxytest.Stallable(t, srv.Addr().String())
			return "nats://" + proxy.Addr()
		},
		natsOpts: []nats.Option{nats.ReconnectWait(50 * time.Millisecond)},
		onStep: func(f *contractSite, s ctStep) {
			if s.name == "receipt_puback" && s.delivered == 1 {
				proxy.Stall()
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

	proxy.Heal()
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
	check.Stays(t, 2500*time.Millisecond, 50*time.Millisecond, func() error {
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
	var proxy *faultproxy.Proxy
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) {
			deliveryBase(c)
			c.DeadLetter.Enabled, c.DeadLetter.AckTermAfterPub = true, true
		},
		script: map[string][]sinkOutcome{"tt-1": {sinkPerm}},
		dial: func(t *testing.T, srv *server.Server) string {
			proxy = faultproxytest.Stallable(t, srv.Addr().String())
			return "nats://" + proxy.Addr()
		},
		natsOpts: []nats.Option{nats.ReconnectWait(50 * time.Millisecond)},
		onStep: func(f *contractSite, s ctStep) {
			if s.name == "receipt_puback" && s.delivered == 1 {
				proxy.Stall()
			}
		},
	})
	seq := f.publish(ctMsg{id: "tt-1"})[0]
	f.start()
	waitSteps(t, f, seq, at(1, stepsDLQ, "confirmed_term"))
	waitCounter(t, f, "ackConfTimeouts", 1)
	ctCounters(t, f.metrics, map[string]float64{"terminated": 0})
	proxy.Heal()
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
