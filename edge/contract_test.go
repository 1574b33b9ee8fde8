package edge

// The delivery-contract suite. Every case runs the real sink
// runner against a real embedded nats-server with JetStream, a real bbolt
// outbox and the real receipt publisher, records the exact order of the
// contract's steps per message and delivery through the runner's trace hook,
// and then checks server-side facts: the consumer's ack state, the advisories
// the server emitted (NAK, Term, max deliveries), and what the receipts and
// DLQ streams hold. Faults are injected by real means (a missing or full
// stream, created or enlarged from a trace hook) or through the runner's
// publisher hook. Only the sink is a test double: it fails on command.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/outbox/outboxtest"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// ---------------------------------------------------------------------------
// The fixture: one edge site, no links.

// Config adjustments and sink scripts the contract cases share.
var (
	ctDLQOn     = func(c *topology.Config) { c.DeadLetter.Enabled = true }
	ctConfirm   = func(c *topology.Config) { c.Delivery.AckConfirmation.Enabled = true }
	ctTerm      = func(c *topology.Config) { c.DeadLetter.Enabled = true; c.DeadLetter.AckTermAfterPub = true }
	ctJSONID    = func(c *topology.Config) { c.EventID.Header = ""; c.EventID.JSONField = "event_id" }
	ctAckWait1s = func(c *topology.Config) { c.Delivery.AckWait = topology.Duration(time.Second) }
	ctPerm      = []sinkOutcome{sinkPerm}
	ctTemp      = []sinkOutcome{sinkTemp}
)

func ctAll(fs ...func(*topology.Config)) func(*topology.Config) {
	return func(c *topology.Config) {
		for _, f := range fs {
			f(c)
		}
	}
}

func ctFixedBackoff(ms int) func(*topology.Config) {
	return func(c *topology.Config) {
		c.Delivery.Retry.Mode, c.Delivery.Retry.Jitter = "fixed", "none"
		c.Delivery.Retry.BackoffMS, c.Delivery.Retry.BackoffMaxMS = ms, ms
	}
}

// TestContract runs every case of the delivery contract, each on a site of
// its own.
func TestContract(t *testing.T) {
	var cases []contractCase
	for _, group := range [][]contractCase{
		contractCasesSuccess(),
		contractCasesTemporary(),
		contractCasesPermanentNoDLQ(),
		contractCasesPermanentDLQ(),
		contractCasesMalformed(),
		contractCasesPoison(),
		contractCasesDLQPublishFailure(),
		contractCasesMaxDeliver(),
		contractCasesReceiptPublishFailure(),
		contractCasesInProgress(),
		contractCasesShutdown(),
		contractCasesExpiry(),
	} {
		cases = append(cases, group...)
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runContractCase(t, tc)
		})
	}
}

// A message held after its DLQ PubAck (here: its dead_lettered receipt is
// not PubAck'ed) and redelivered after the DLQ stream's Nats-Msg-Id
// duplicate window gets no second DLQ record: the window is not a dead
// letter's only protection. Redeliveries that late are ordinary: NAK backoff up to 24h, AckWait up to
// 1h, a receipts stream that stays full during a long link cut.
func TestContract_DeadLetterRedeliveredAfterDuplicateWindow(t *testing.T) {
	t.Parallel()
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) {
			c.DeadLetter.Enabled = true
			c.Topology.Events.DuplicateWindow = topology.Duration(time.Second)
			c.Delivery.Retry.BackoffMS, c.Delivery.Retry.BackoffMaxMS = 2500, 2500
		},
		wrapPub: failFirst(1),
		script:  map[string][]sinkOutcome{"win-0": {sinkPerm}},
	})
	seq := f.publish(ctMsg{id: "win-0"})[0]
	f.start()
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if ss := stepNames(f.stepsOf(seq)); !slices.Contains(ss, "ack@2") {
			return fmt.Errorf("steps %v", ss)
		}
		return nil
	})
	if recs := f.dlqRecords(); len(recs) != 1 {
		t.Errorf("DLQ stream holds %d records for one message (deliveries %v): a redelivered dead letter was dead-lettered again", len(recs), ctDelivered(recs))
	}
}

func ctDelivered(recs []runner.DLQRecord) []uint64 {
	var out []uint64
	for _, r := range recs {
		out = append(out, r.Delivered)
	}
	return out
}

// With max_deliver_action dead_letter, a DLQ publish failure on the last
// delivery must not NAK a message that the server will never redeliver
// (no DLQ record, no dead_lettered receipt, no ACK): the configured outcome
// still happens.
func TestContract_MaxDeliverDeadLetterLostWhenDLQFailsOnLastDelivery(t *testing.T) {
	t.Parallel()
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) {
			c.DeadLetter.Enabled = true
			c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 2, "dead_letter"
		},
		dlq:    dlqMissing,
		script: map[string][]sinkOutcome{"last-0": {sinkTemp}},
		onStep: func(f *contractSite, s ctStep) {
			if s.name == "nak" && s.delivered == 2 {
				ctCreateDLQStream(f, 0) // the DLQ is back right away
			}
		},
	})
	seq := f.publish(ctMsg{id: "last-0"})[0]
	f.start()
	check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
		if f.advisoriesFor("MAX_DELIVERIES", seq) > 0 || f.streamMsgCount(f.cfg.DeadLetter.Stream) > 0 {
			return nil
		}
		return fmt.Errorf("steps %v", stepNames(f.stepsOf(seq)))
	})
	if n := f.advisoriesFor("MAX_DELIVERIES", seq); n > 0 {
		t.Fatalf("the server gave up on the message after %v; it was never dead-lettered (DLQ holds %d, receipts %d)",
			stepNames(f.stepsOf(seq)), f.streamMsgCount(f.cfg.DeadLetter.Stream), f.streamMsgCount(ctReceipts))
	}
}

// max_deliver exhaustion with action leave is counted whatever held the
// message: one held by a DLQ publish failure (a temporary failure) on its
// last delivery, which the server then drops (max-deliveries advisory),
// counts in max_deliver_exhausted_total too.
func TestContract_MaxDeliverExhaustionOfHeldMessageNotCounted(t *testing.T) {
	t.Parallel()
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) {
			c.DeadLetter.Enabled = true
			c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 2, "leave"
		},
		dlq:    dlqMissing,
		script: map[string][]sinkOutcome{"held-0": {sinkPerm}},
	})
	seq := f.publish(ctMsg{id: "held-0"})[0]
	f.start()
	check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
		if f.advisoriesFor("MAX_DELIVERIES", seq) == 0 {
			return fmt.Errorf("no max-deliveries advisory yet; steps %v", stepNames(f.stepsOf(seq)))
		}
		return nil
	})
	if got := stepNames(f.stepsOf(seq)); !slices.Equal(got, cat(at(1, "dlq_publish", "nak"), at(2, "dlq_publish", "nak"))) {
		t.Errorf("steps %v", got)
	}
	if v := ctCounterValues(f.metrics)["maxDeliverExhausted"]; v != 1 {
		t.Errorf("max_deliver_exhausted_total = %v after the server gave up on the message, want 1", v)
	}
}

func runContractCase(t *testing.T, tc contractCase) {
	f := newContractSite(t, tc.opts)
	seqs := f.publish(tc.msgs...)
	if tc.opts.before != nil {
		tc.opts.before(t, f)
	}
	if f.t.Failed() {
		return
	}
	f.start()
	for i, want := range tc.want {
		if len(want) == 0 {
			continue
		}
		check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
			if got := stepNames(f.stepsOf(seqs[i])); len(got) < len(want) {
				return fmt.Errorf("message %d (seq %d): steps %v, want %v", i, seqs[i], got, want)
			}
			return nil
		})
	}
	if tc.pending >= 0 {
		check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
			if ci := f.consumerInfo(); ci.NumAckPending != tc.pending {
				return fmt.Errorf("consumer ack pending %d, want %d", ci.NumAckPending, tc.pending)
			}
			return nil
		})
	}
	for i, want := range tc.want {
		got := f.stepsOf(seqs[i])
		if !slices.Equal(stepNames(got), want) {
			t.Errorf("message %d (seq %d):\n got  %v\n want %v", i, seqs[i], stepNames(got), want)
		}
		checkContractInvariants(t, fmt.Sprintf("message %d", i), got)
		f.checkWire(t, i, seqs[i], got)
	}
	if tc.check != nil {
		tc.check(t, f, seqs)
	}
	if f.sink != nil {
		f.sink.mu.Lock()
		for id, n := range f.sink.records {
			if n > 1 {
				t.Errorf("sink holds %d records of %q", n, id)
			}
		}
		f.sink.mu.Unlock()
	}
	// A receipt is never in the stream twice.
	if f.streamMsgCount(ctReceipts) > 0 {
		seen := map[string]bool{}
		for _, r := range f.receiptsInStream() {
			k := r.EventID + "/" + string(r.Status)
			if seen[k] {
				t.Errorf("receipt %s published twice", k)
			}
			seen[k] = true
		}
	}
}

// checkWire checks that the server received exactly the acknowledgements
// the trace claims, in order, each in its form: a confirmed ACK or Term is
// a request the server answers, an ordinary one is not; a NAK carries the
// backoff computed for its delivery; "leave" sends nothing.
func (f *contractSite) checkWire(t *testing.T, i int, seq uint64, steps []ctStep) {
	t.Helper()
	var want []string
	var delays []time.Duration
	for _, s := range steps {
		if finalSteps[s.name] && s.name != "leave" {
			want = append(want, fmt.Sprintf("%s@%d", s.name, s.delivered))
			if s.name == "nak" {
				delays = append(delays, runner.Backoff(f.cfg.Delivery.Retry)(s.delivered))
			}
		}
	}
	var got []string
	var wires []ctWire
	check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
		wires = f.wireOf(seq, false)
		got = got[:0]
		for _, w := range wires {
			got = append(got, fmt.Sprintf("%s@%d", w.kind(), w.delivered))
		}
		if len(got) < len(want) {
			return fmt.Errorf("message %d: wire %v, want %v", i, got, want)
		}
		return nil
	})
	if !slices.Equal(got, want) {
		t.Errorf("message %d (seq %d) on the wire:\n got  %v\n want %v", i, seq, got, want)
		return
	}
	if f.cfg.Delivery.Retry.Jitter != "none" {
		return
	}
	k := 0
	for _, w := range wires {
		if w.kind() == "nak" {
			if w.nakDelay() != delays[k] {
				t.Errorf("message %d: NAK of delivery %d asked for %s, want the computed %s", i, w.delivered, w.nakDelay(), delays[k])
			}
			k++
		}
	}
}

// ---------------------------------------------------------------------------
// Case helpers.

// failFirst returns a publisher wrapper that fails its first n calls.
func failFirst(n int64) func(outbox.Publisher) outbox.Publisher {
	return func(p outbox.Publisher) outbox.Publisher {
		fp := &outboxtest.FailingPublisher{Next: p}
		fp.Fails.Store(n)
		return fp
	}
}

// ctCreateDLQStream creates the appliance's DLQ stream, or updates it to
// hold maxMsgs messages (0: no limit).
func ctCreateDLQStream(f *contractSite, maxMsgs int64) {
	site, _ := f.cfg.Topology.Site(ctSite)
	for _, sc := range jsplan.SitePlan(f.cfg, site).Streams {
		if sc.Name != f.cfg.DeadLetter.Stream {
			continue
		}
		if maxMsgs > 0 {
			sc.MaxMsgs = maxMsgs
		}
		if _, err := f.client.CreateOrUpdateStream(context.Background(), sc); err != nil {
			f.t.Error(err)
		}
	}
}

// ctWantDLQ checks the one DLQ record of seq.
func ctWantDLQ(t *testing.T, f *contractSite, seq uint64, eventID, errorType, idErrContains string) {
	t.Helper()
	recs := f.dlqRecords()
	if len(recs) != 1 {
		t.Fatalf("DLQ records %d, want 1", len(recs))
	}
	r := recs[0]
	if r.StreamSeq != seq || r.EventID != eventID || r.ErrorType != errorType {
		t.Errorf("DLQ record %+v: want seq %d event_id %q error_type %q", r, seq, eventID, errorType)
	}
	if eventID == "" && (r.EventIDError == "" || !strings.Contains(r.EventIDError, idErrContains)) {
		t.Errorf("event_id_error %q, want it to mention %q", r.EventIDError, idErrContains)
	}
	if eventID != "" && r.EventIDError != "" {
		t.Errorf("event_id_error %q with an event_id", r.EventIDError)
	}
	if r.Payload != nil || r.Headers != nil || r.Error != "" {
		t.Errorf("DLQ record carries payload/headers/error without include_*")
	}
}

// ctNakDelays checks that each redelivery came no earlier than about the
// NAK delay after the NAK (generous bounds: half the delay, at most 10s).
func ctNakDelays(t *testing.T, steps []ctStep, delays []time.Duration) {
	t.Helper()
	for i, d := range delays {
		var nak, next time.Time
		for _, s := range steps {
			if s.delivered == uint64(i+1) && s.name == "nak" {
				nak = s.at
			}
			if s.delivered == uint64(i+2) && next.IsZero() {
				next = s.at
			}
		}
		if nak.IsZero() || next.IsZero() {
			t.Errorf("delivery %d: no NAK or no redelivery in %v", i+1, stepNames(steps))
			continue
		}
		if gap := next.Sub(nak); gap < d/2 || gap > d+10*time.Second {
			t.Errorf("delivery %d: redelivered %s after the NAK, want about %s", i+1, gap, d)
		}
	}
}

// ctSlowSink: the sink write takes longer than AckWait (1s). While it runs
// the test probes the consumer from its own connection: with InProgress
// heartbeats nothing is redelivered for 2.5 AckWaits; without them the
// probe receives the redelivery.
func ctSlowSink(heartbeats bool) contractOpts {
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	o := contractOpts{
		configure: func(c *topology.Config) {
			c.Delivery.AckWait = topology.Duration(time.Second)
			c.Delivery.InProgress.Enabled = heartbeats
			c.Delivery.InProgress.IntervalMS = 250
		},
		hold: func(sink.Event) {
			once.Do(func() { close(started) })
			<-release
		},
	}
	o.before = func(t *testing.T, f *contractSite) {
		go func() {
			defer close(release)
			<-started
			ctx := context.Background()
			cons, err := f.client.Consumer(ctx, ctStream, ctConsumer)
			if err != nil {
				t.Error(err)
				return
			}
			probe := func() (uint64, bool) {
				b, err := cons.Fetch(1, jetstream.FetchMaxWait(250*time.Millisecond))
				if err != nil {
					return 0, false
				}
				for m := range b.Messages() {
					md, _ := m.Metadata()
					return md.NumDelivered, true // never acked by the probe
				}
				return 0, false
			}
			deadline := time.Now().Add(2500 * time.Millisecond)
			for time.Now().Before(deadline) {
				if d, ok := probe(); ok {
					if heartbeats {
						t.Errorf("redelivered (delivery %d) while the sink ran, despite InProgress heartbeats", d)
					}
					return
				}
			}
			if !heartbeats {
				t.Error("control: without heartbeats the message was not redelivered after 2.5 AckWaits; the probe proves nothing")
			}
		}()
	}
	return o
}

// ctShutdownSink: batch size 1; the first write blocks until the runner
// has been cancelled.
func ctShutdownSink() contractOpts {
	var f *contractSite
	o := contractOpts{configure: func(c *topology.Config) { c.Delivery.BatchSize = 1 }}
	o.before = func(t *testing.T, site *contractSite) { f = site }
	o.hold = func(sink.Event) {
		f.cancel()
	}
	return o
}

// ctCounterValues reads the runner's counters by field name.
func ctCounterValues(m *metrics) map[string]float64 {
	cs := map[string]prometheus.Collector{
		"fetched": m.fetched, "processed": m.processed, "acked": m.acked, "nacked": m.nacked,
		"terminated": m.terminated, "deadLettered": m.deadLettered, "expired": m.expired, "permanentUnacked": m.permanentUnacked,
		"redeliveries": m.redeliveries, "maxDeliverExhausted": m.maxDeliverExhausted,
		"receiptsPublished": m.receiptsPublished, "receiptPublishErrors": m.receiptPublishErrors,
		"dlqPublishErrors": m.dlqPublishErrors,
		"ackConfAttempts":  m.ackConfAttempts, "ackConfSuccesses": m.ackConfSuccesses,
		"ackConfTimeouts": m.ackConfTimeouts, "ackConfFailures": m.ackConfFailures,
		"ackConfUnsupported": m.ackConfUnsupported,
	}
	out := make(map[string]float64, len(cs))
	for k, c := range cs {
		out[k] = testutil.ToFloat64(c)
	}
	return out
}

// ctCounters checks counters by field name.
func ctCounters(t *testing.T, m *metrics, want map[string]float64) {
	t.Helper()
	got := ctCounterValues(m)
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("no counter %q", k)
			continue
		}
		if g != w {
			t.Errorf("counter %s = %v, want %v", k, g, w)
		}
	}
}

// ctHistCount is a histogram's sample count.
func ctHistCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
