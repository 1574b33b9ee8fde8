package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// trace records a step of the contract that the runner reports.
func (f *contractSite) trace(step, eventID string, meta *jetstream.MsgMetadata) {
	s := ctStep{name: step, seq: meta.Sequence.Stream, delivered: meta.NumDelivered, eventID: eventID, at: time.Now()}
	f.mu.Lock()
	f.steps = append(f.steps, s)
	f.mu.Unlock()
	if f.onStep != nil {
		f.onStep(f, s)
	}
}

// receiptRecord is the receipt record the runner writes for eventID.
func (f *contractSite) receiptRecord(eventID string, status receipt.Status, reason string) (outbox.Record, error) {
	r, err := runner.New(f.ro)
	if err != nil {
		return outbox.Record{}, err
	}
	return r.ReceiptRecord(eventID, status, reason)
}

// start builds the runner from f.ro and lets it fetch.
func (f *contractSite) start() {
	f.t.Helper()
	r, err := runner.New(f.ro)
	if err != nil {
		f.t.Fatal(err)
	}
	f.r, f.started = r, true
	rctx, rcancel := context.WithCancel(context.Background())
	f.cancel = rcancel
	go func() { f.done <- r.Run(rctx) }()
}

// stop cancels the runner and waits for run to return; a batch in flight
// finishes first.
func (f *contractSite) stop() {
	if f.stopped || !f.started {
		return
	}
	f.stopped = true
	f.cancel()
	select {
	case err := <-f.done:
		if err != nil {
			f.t.Errorf("runner returned %v", err)
		}
	case <-time.After(30 * time.Second):
		f.t.Error("runner did not stop within 30s")
	}
}

// ctMsg is a message published into the edge stream.
type ctMsg struct {
	id      string // Nats-Msg-Id header (the event_id by default); "" means none
	subject string // default "events.test"
	data    []byte // default {"k":1}
	header  map[string]string
}

func (f *contractSite) publish(msgs ...ctMsg) []uint64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seqs := make([]uint64, len(msgs))
	for i, cm := range msgs {
		subj := cm.subject
		if subj == "" {
			subj = "events.test"
		}
		m := nats.NewMsg(subj)
		if cm.id != "" {
			m.Header.Set(jetstream.MsgIDHeader, cm.id)
		}
		for k, v := range cm.header {
			m.Header.Set(k, v)
		}
		m.Data = cm.data
		if m.Data == nil {
			m.Data = []byte(`{"k":1}`)
		}
		ack, err := f.client.PublishMsg(ctx, m)
		if err != nil {
			f.t.Fatalf("publish %d: %v", i, err)
		}
		if ack.Duplicate {
			f.t.Fatalf("publish %d: stream reported a duplicate", i)
		}
		seqs[i] = ack.Sequence
	}
	return seqs
}

// stepsOf returns the recorded steps of one stream message.
func (f *contractSite) stepsOf(seq uint64) []ctStep {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ctStep
	for _, s := range f.steps {
		if s.seq == seq {
			out = append(out, s)
		}
	}
	return out
}

// stepNames renders steps as "step@delivery". A "dlq_recorded" step (a
// runner that finds, in its outbox, that an earlier delivery's DLQ record
// was PubAck'ed, and skips the publish) is rendered as the publish and
// PubAck it stands for, so that expectations hold either way.
func stepNames(ss []ctStep) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if s.name == "dlq_recorded" {
			out = append(out, fmt.Sprintf("dlq_publish@%d", s.delivered), fmt.Sprintf("dlq_puback@%d", s.delivered))
			continue
		}
		out = append(out, s.String())
	}
	return out
}

// wireOf returns the acknowledgements of one stream message, in the order
// the server received them; InProgress heartbeats only if withWPI.
func (f *contractSite) wireOf(seq uint64, withWPI bool) []ctWire {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ctWire
	for _, w := range f.wire {
		if w.seq == seq && (withWPI || w.kind() != "in_progress") {
			out = append(out, w)
		}
	}
	return out
}

func (f *contractSite) advisories(kind string) []ctAdvisory {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.advs[kind])
}

func (f *contractSite) advisoriesFor(kind string, seq uint64) int {
	n := 0
	for _, a := range f.advisories(kind) {
		if a.StreamSeq == seq {
			n++
		}
	}
	return n
}

func (f *contractSite) consumerInfo() *jetstream.ConsumerInfo {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := f.client.Consumer(ctx, ctStream, ctConsumer)
	if err != nil {
		f.t.Fatal(err)
	}
	return c.CachedInfo()
}

// streamMsgCount is the number of messages in a stream (0 if it does not exist).
func (f *contractSite) streamMsgCount(name string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := f.client.Stream(ctx, name)
	if err != nil {
		return 0
	}
	return s.CachedInfo().State.Msgs
}

// streamRawMsgs returns every message of a stream, in order.
func (f *contractSite) streamRawMsgs(name string) []*jetstream.RawStreamMsg {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := f.client.Stream(ctx, name)
	if err != nil {
		f.t.Fatalf("stream %s: %v", name, err)
	}
	st := s.CachedInfo().State
	var out []*jetstream.RawStreamMsg
	for seq := st.FirstSeq; seq <= st.LastSeq && st.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			f.t.Fatalf("stream %s seq %d: %v", name, seq, err)
		}
		out = append(out, m)
	}
	return out
}

// dlqRecords decodes every DLQ record the runner wrote (the filler of a
// "full" DLQ stream is skipped).
func (f *contractSite) dlqRecords() []runner.DLQRecord {
	f.t.Helper()
	var out []runner.DLQRecord
	for _, m := range f.streamRawMsgs(f.cfg.DeadLetter.Stream) {
		if m.Header.Get(jetstream.MsgIDHeader) == "filler" {
			continue
		}
		if want := "leafline.dlq." + ctSite; m.Subject != want {
			f.t.Errorf("DLQ record on subject %q, want %q", m.Subject, want)
		}
		r, err := runner.DecodeDLQRecord(m.Data)
		if err != nil {
			f.t.Fatalf("DLQ record %d: %v", m.Sequence, err)
		}
		if got, want := m.Header.Get(jetstream.MsgIDHeader), fmt.Sprintf("dlq-%s-%s-%d", ctSite, r.Stream, r.StreamSeq); got != want {
			f.t.Errorf("DLQ record Nats-Msg-Id %q, want %q", got, want)
		}
		out = append(out, r)
	}
	return out
}

// receiptsInStream decodes every receipt in the edge receipts stream.
func (f *contractSite) receiptsInStream() []receipt.Receipt {
	f.t.Helper()
	var out []receipt.Receipt
	for _, m := range f.streamRawMsgs(ctReceipts) {
		raws, err := receipt.Unbundle(m.Data, m.Header)
		if err != nil {
			f.t.Fatalf("receipts message %d: %v", m.Sequence, err)
		}
		var ids []string
		for _, raw := range raws {
			r, err := receipt.Decode(raw)
			if err != nil {
				f.t.Fatalf("receipt in message %d: %v", m.Sequence, err)
			}
			status := string(r.Status)
			if receipt.IsBundle(m.Header) {
				status = receipt.BundleToken
			}
			if want := f.cfg.Topology.ReceiptSubject(ctSite, status); m.Subject != want {
				f.t.Errorf("receipt on subject %q, want %q", m.Subject, want)
			}
			ids = append(ids, r.MsgID())
			out = append(out, r)
		}
		want := ids[0]
		if receipt.IsBundle(m.Header) {
			want = receipt.BundleMsgID(ids)
		}
		if got := m.Header.Get(jetstream.MsgIDHeader); got != want {
			f.t.Errorf("receipts message %d Nats-Msg-Id %q, want %q", m.Sequence, got, want)
		}
	}
	return out
}

func (f *contractSite) outboxStats() outbox.Stats {
	f.t.Helper()
	st, err := f.ob.Stats()
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// ---------------------------------------------------------------------------
// Expected step sequences.

var (
	stepsOK     = []string{"sink_commit", "outbox_commit", "receipt_publish", "receipt_puback"}
	stepsDLQ    = []string{"dlq_publish", "dlq_puback", "outbox_commit", "receipt_publish", "receipt_puback"}
	stepsDLQNoR = []string{"dlq_publish", "dlq_puback"} // no event_id: no receipt
)

// at tags steps with a delivery count: at(2, "nak") is "nak@2".
func at(d int, parts ...any) []string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			out = append(out, fmt.Sprintf("%s@%d", v, d))
		case []string:
			for _, s := range v {
				out = append(out, fmt.Sprintf("%s@%d", s, d))
			}
		default:
			panic(fmt.Sprintf("at: %T", p))
		}
	}
	return out
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var finalSteps = map[string]bool{"ack": true, "double_ack": true, "term": true, "confirmed_term": true, "nak": true, "leave": true}

// checkContractInvariants checks the rules of the delivery contract that
// must hold for every delivery of every message, whatever the case.
func checkContractInvariants(t *testing.T, label string, steps []ctStep) {
	t.Helper()
	var order []uint64
	by := map[uint64][]string{}
	for _, s := range steps {
		if _, ok := by[s.delivered]; !ok {
			order = append(order, s.delivered)
		}
		if s.name == "dlq_recorded" {
			by[s.delivered] = append(by[s.delivered], "dlq_publish", "dlq_puback")
			continue
		}
		by[s.delivered] = append(by[s.delivered], s.name)
	}
	for _, d := range order {
		names := by[d]
		idx := func(n string) int { return slices.Index(names, n) }
		has := func(n string) bool { return idx(n) >= 0 }
		before := func(a, b string) bool { return has(a) && has(b) && idx(a) < idx(b) }
		fail := func(format string, args ...any) {
			t.Errorf("%s delivery %d %v: %s", label, d, names, fmt.Sprintf(format, args...))
		}
		var finals []string
		for _, n := range names {
			if finalSteps[n] {
				finals = append(finals, n)
			}
		}
		if len(finals) == 0 {
			continue // still in flight (or abandoned by a stopped runner)
		}
		if len(finals) != 1 {
			fail("want exactly one final action, got %v", finals)
			continue
		}
		final := finals[0]
		if names[len(names)-1] != final {
			fail("the final action %s is not the last step", final)
		}
		if has("receipt_publish") && !before("outbox_commit", "receipt_publish") {
			fail("receipt published before its outbox commit")
		}
		if has("receipt_puback") && !before("receipt_publish", "receipt_puback") {
			fail("receipt PubAck without a publish")
		}
		if has("dlq_puback") && !before("dlq_publish", "dlq_puback") {
			fail("DLQ PubAck without a publish")
		}
		if has("dlq_puback") && has("outbox_commit") && !before("dlq_puback", "outbox_commit") {
			fail("dead_lettered receipt committed before the DLQ PubAck")
		}
		if has("sink_commit") && has("outbox_commit") && !before("sink_commit", "outbox_commit") {
			fail("outbox commit before the sink commit")
		}
		if has("expired") && has("sink_commit") {
			fail("an expired event was handed to the sink")
		}
		switch final {
		case "term", "confirmed_term":
			if has("sink_commit") {
				fail("AckTerm after a successful sink write")
			}
			if !before("dlq_puback", final) {
				fail("AckTerm before (or without) the DLQ PubAck")
			}
			if has("receipt_publish") && !has("receipt_puback") {
				fail("AckTerm without the dead_lettered receipt's PubAck")
			}
		case "ack", "double_ack":
			if !has("sink_commit") && !has("dlq_puback") && !has("expired") {
				fail("ACK without a durable sink commit, a DLQ PubAck or an expiry")
			}
			if has("expired") && (!before("expired", "outbox_commit") || !has("receipt_puback")) {
				fail("ACK of an expired event without its expired receipt committed and PubAck'ed")
			}
			if has("sink_commit") && !has("outbox_commit") {
				fail("ACK of a sink commit without its outbox commit")
			}
			if has("receipt_publish") && !has("receipt_puback") {
				fail("ACK without the receipt PubAck")
			}
			if has("dlq_publish") && !has("dlq_puback") {
				fail("ACK although the DLQ publish failed")
			}
		}
	}
}

// ---------------------------------------------------------------------------
// The suite.

type contractCase struct {
	name string
	opts contractOpts
	msgs []ctMsg
	// want is, per message, its exact steps ("step@delivery").
	want [][]string
	// pending is the consumer's NumAckPending once the case has settled;
	// -1 skips the check.
	pending int
	check   func(t *testing.T, f *contractSite, seqs []uint64)
}

func ids(n int, prefix string) []ctMsg {
	out := make([]ctMsg, n)
	for i := range out {
		out[i] = ctMsg{id: fmt.Sprintf("%s-%d", prefix, i)}
	}
	return out
}

func repeat(n int, steps []string) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = steps
	}
	return out
}

// receiptCount is the number of receipts in the edge receipts stream,
// alone or in bundles.
func (f *contractSite) receiptCount() int {
	f.t.Helper()
	return len(f.receiptsInStream())
}
