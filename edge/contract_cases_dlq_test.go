package edge

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/receipt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// contractCasesPermanentNoDLQ: permanent failures without a DLQ: left unacked, counted.
func contractCasesPermanentNoDLQ() []contractCase {
	return []contractCase{
		{
			name:    "permanent_without_dlq_left_unacked",
			opts:    contractOpts{script: map[string][]sinkOutcome{"p-0": ctPerm}},
			msgs:    ids(1, "p"),
			want:    [][]string{at(1, "leave")},
			pending: 1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.receiptCount(); n != 0 {
					t.Errorf("receipts %d, want 0", n)
				}
				if len(f.advisories("MSG_TERMINATED"))+len(f.advisories("MSG_NAKED")) != 0 {
					t.Error("permanent failure without DLQ was NAKed or terminated")
				}
				ctCounters(t, f.metrics, map[string]float64{"permanentUnacked": 1, "acked": 0, "nacked": 0, "terminated": 0})
			},
		},
		{
			name:    "permanent_without_dlq_left_again_on_redelivery",
			opts:    contractOpts{configure: ctAll(ctAckWait1s, func(c *topology.Config) { c.DeadLetter.AckTermAfterPub = true }), script: map[string][]sinkOutcome{"pr-0": ctPerm}},
			msgs:    ids(1, "pr"),
			want:    [][]string{cat(at(1, "leave"), at(2, "leave"))},
			pending: 1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"permanentUnacked": 2, "acked": 0, "terminated": 0})
			},
		},
		{
			name:    "missing_event_id_without_dlq_left_unacked",
			msgs:    []ctMsg{{}},
			want:    [][]string{at(1, "leave")},
			pending: 1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if b := f.sink.writeBatches(); len(b) != 0 {
					t.Errorf("sink saw %v", b)
				}
			},
		},
	}
}

// contractCasesPermanentDLQ: permanent failures with a DLQ.
func contractCasesPermanentDLQ() []contractCase {
	return []contractCase{
		{
			name: "permanent_with_dlq_ack",
			opts: contractOpts{configure: ctDLQOn, script: map[string][]sinkOutcome{"d-0": ctPerm}},
			msgs: []ctMsg{{id: "d-0", header: map[string]string{"X-Secret": "s3cret"}, data: []byte(`{"secret":"payload"}`)}},
			want: [][]string{at(1, stepsDLQ, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				recs := f.dlqRecords()
				if len(recs) != 1 {
					t.Fatalf("DLQ records %d, want 1", len(recs))
				}
				r := recs[0]
				if r.Site != ctSite || r.Subject != "events.test" || r.Stream != ctStream || r.Consumer != ctConsumer ||
					r.StreamSeq != seqs[0] || r.ConsumerSeq != 1 || r.EventID != "d-0" || r.EventIDError != "" ||
					r.Delivered != 1 || r.ErrorType != "sink_permanent" || r.Version != runner.DLQVersion {
					t.Errorf("DLQ record %+v", r)
				}
				if time.Since(r.DeadLetteredAt) > time.Minute || r.DeadLetteredAt.After(time.Now()) {
					t.Errorf("dead_lettered_at %s", r.DeadLetteredAt)
				}
				if r.Payload != nil || r.Headers != nil || r.Error != "" {
					t.Errorf("DLQ record carries payload/headers/error without include_*: %+v", r)
				}
				raw := f.streamRawMsgs(f.cfg.DeadLetter.Stream)[0].Data
				if strings.Contains(string(raw), "s3cret") || strings.Contains(string(raw), "payload") {
					t.Errorf("DLQ record leaks the message: %s", raw)
				}
				rs := f.receiptsInStream()
				if len(rs) != 1 || rs[0].EventID != "d-0" || rs[0].Status != receipt.StatusDeadLettered || rs[0].Reason != "sink_permanent" {
					t.Errorf("receipts %+v, want one dead_lettered", rs)
				}
				ctCounters(t, f.metrics, map[string]float64{"deadLettered": 1, "acked": 1, "terminated": 0, "processed": 0, "dlqPublishErrors": 0})
			},
		},
		{
			name: "permanent_with_dlq_confirmed_ack",
			opts: contractOpts{configure: ctAll(ctDLQOn, ctConfirm), script: map[string][]sinkOutcome{"dc-0": ctPerm}},
			msgs: ids(1, "dc"),
			want: [][]string{at(1, stepsDLQ, "double_ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"ackConfAttempts": 1, "ackConfSuccesses": 1, "deadLettered": 1, "acked": 1})
				if n := len(f.advisories("MSG_TERMINATED")); n != 0 {
					t.Errorf("%d Terms without ack_term_after_publish", n)
				}
			},
		},
		{
			name: "permanent_with_dlq_term",
			opts: contractOpts{configure: ctTerm, script: map[string][]sinkOutcome{"dt-0": ctPerm}},
			msgs: ids(1, "dt"),
			want: [][]string{at(1, stepsDLQ, "term")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
					if n := f.advisoriesFor("MSG_TERMINATED", seqs[0]); n != 1 {
						return fmt.Errorf("server saw %d Terms of seq %d, want 1", n, seqs[0])
					}
					return nil
				})
				ctCounters(t, f.metrics, map[string]float64{"terminated": 1, "acked": 0, "deadLettered": 1, "ackConfAttempts": 0, "ackConfUnsupported": 0})
				if n := f.streamMsgCount(f.cfg.DeadLetter.Stream); n != 1 {
					t.Errorf("DLQ holds %d", n)
				}
			},
		},
		{
			name: "permanent_with_dlq_term_confirmed",
			opts: contractOpts{configure: ctAll(ctTerm, ctConfirm), script: map[string][]sinkOutcome{"dtc-0": ctPerm}},
			msgs: ids(1, "dtc"),
			want: [][]string{at(1, stepsDLQ, "confirmed_term")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
					if n := f.advisoriesFor("MSG_TERMINATED", seqs[0]); n != 1 {
						return fmt.Errorf("server saw %d Terms, want 1", n)
					}
					return nil
				})
				ctCounters(t, f.metrics, map[string]float64{"terminated": 1, "ackConfAttempts": 1, "ackConfSuccesses": 1, "ackConfUnsupported": 0, "acked": 0})
			},
		},
		{
			name: "permanent_with_dlq_include_payload_headers_error",
			opts: contractOpts{configure: func(c *topology.Config) {
				c.DeadLetter.Enabled, c.DeadLetter.IncludePayload, c.DeadLetter.IncludeHeaders, c.DeadLetter.IncludeError = true, true, true, true
			}, script: map[string][]sinkOutcome{"inc-0": ctPerm}},
			msgs: []ctMsg{{id: "inc-0", header: map[string]string{"X-Trace": "t1"}, data: []byte("raw\x00bytes")}},
			want: [][]string{at(1, stepsDLQ, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				recs := f.dlqRecords()
				if len(recs) != 1 {
					t.Fatalf("DLQ records %d", len(recs))
				}
				r := recs[0]
				if string(r.Payload) != "raw\x00bytes" {
					t.Errorf("payload %q", r.Payload)
				}
				if r.Headers["X-Trace"] == nil || r.Headers[jetstream.MsgIDHeader] == nil {
					t.Errorf("headers %v", r.Headers)
				}
				if !strings.Contains(r.Error, "injected permanent failure") {
					t.Errorf("error %q", r.Error)
				}
			},
		},
	}
}

// contractCasesMalformed: malformed messages → DLQ.
func contractCasesMalformed() []contractCase {
	return []contractCase{
		{
			name: "missing_event_id_header_dead_lettered",
			opts: contractOpts{configure: ctDLQOn},
			msgs: []ctMsg{{}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "missing")
				if n := f.receiptCount(); n != 0 {
					t.Errorf("a receipt without an event_id was published (%d)", n)
				}
				if b := f.sink.writeBatches(); len(b) != 0 {
					t.Errorf("sink saw %v", b)
				}
			},
		},
		{
			name: "json_field_missing_dead_lettered",
			opts: contractOpts{configure: ctAll(ctDLQOn, ctJSONID)},
			msgs: []ctMsg{{data: []byte(`{"id":"nope"}`)}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "missing")
			},
		},
		{
			name: "json_field_not_a_string_dead_lettered",
			opts: contractOpts{configure: ctAll(ctDLQOn, ctJSONID)},
			msgs: []ctMsg{{data: []byte(`{"event_id":42}`)}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "not a string")
			},
		},
		{
			name: "payload_not_json_dead_lettered",
			opts: contractOpts{configure: ctAll(ctDLQOn, ctJSONID)},
			msgs: []ctMsg{{data: []byte(`not json`)}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "not a JSON object")
			},
		},
		{
			name: "event_id_too_long_dead_lettered",
			opts: contractOpts{configure: ctDLQOn},
			msgs: []ctMsg{{id: strings.Repeat("x", 600)}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "600 bytes")
			},
		},
		{
			// The event_id is readable, so L1 learns the event is dead.
			name: "oversize_message_dead_lettered_with_receipt",
			opts: contractOpts{configure: ctAll(ctDLQOn, func(c *topology.Config) { c.Delivery.MaxMessageBytes = 64 })},
			msgs: []ctMsg{{id: "big-0", data: []byte(strings.Repeat("z", 200))}},
			want: [][]string{at(1, stepsDLQ, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "big-0", "oversize", "")
				if rs := f.receiptsInStream(); len(rs) != 1 || rs[0].Status != receipt.StatusDeadLettered || rs[0].Reason != "oversize" {
					t.Errorf("receipts %+v", rs)
				}
				if b := f.sink.writeBatches(); len(b) != 0 {
					t.Errorf("sink saw an oversize message: %v", b)
				}
			},
		},
		{
			name: "missing_event_id_terminated",
			opts: contractOpts{configure: ctAll(ctTerm, ctConfirm)},
			msgs: []ctMsg{{}},
			want: [][]string{at(1, stepsDLQNoR, "confirmed_term")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
					if n := f.advisoriesFor("MSG_TERMINATED", seqs[0]); n != 1 {
						return fmt.Errorf("%d Terms", n)
					}
					return nil
				})
			},
		},
	}
}

// contractCasesPoison: poison isolation.
func contractCasesPoison() []contractCase {
	return []contractCase{
		{
			name: "poison_in_batch_only_it_dead_lettered",
			opts: contractOpts{configure: ctDLQOn, script: map[string][]sinkOutcome{"q-4": ctPerm}},
			msgs: ids(10, "q"),
			want: func() [][]string {
				w := repeat(10, at(1, stepsOK, "ack"))
				w[4] = at(1, stepsDLQ, "ack")
				return w
			}(),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if b := f.sink.writeBatches(); len(b) != 1 || len(b[0]) != 10 {
					t.Errorf("sink batches %v, want one batch of 10", b)
				}
				recs := f.dlqRecords()
				if len(recs) != 1 || recs[0].EventID != "q-4" || recs[0].StreamSeq != seqs[4] {
					t.Errorf("DLQ %+v", recs)
				}
				var processed, dead int
				for _, r := range f.receiptsInStream() {
					switch {
					case r.Status == receipt.StatusProcessed && r.EventID != "q-4":
						processed++
					case r.Status == receipt.StatusDeadLettered && r.EventID == "q-4":
						dead++
					default:
						t.Errorf("unexpected receipt %+v", r)
					}
				}
				if processed != 9 || dead != 1 {
					t.Errorf("receipts: %d processed, %d dead_lettered; want 9 and 1", processed, dead)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 10, "processed": 9, "deadLettered": 1})
			},
		},
		{
			name: "poison_without_event_id_in_batch",
			opts: contractOpts{configure: ctDLQOn},
			msgs: []ctMsg{{id: "r-0"}, {id: "r-1"}, {}, {id: "r-3"}, {id: "r-4"}},
			want: [][]string{
				at(1, stepsOK, "ack"), at(1, stepsOK, "ack"), at(1, stepsDLQNoR, "ack"), at(1, stepsOK, "ack"), at(1, stepsOK, "ack"),
			},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if b := f.sink.writeBatches(); len(b) != 1 || len(b[0]) != 4 {
					t.Errorf("sink batches %v, want one batch of the 4 good events", b)
				}
				if n := f.receiptCount(); n != 4 {
					t.Errorf("receipts %d, want 4", n)
				}
			},
		},
		{
			// AckTerm never follows a successful sink write, even in a
			// batch where another message is terminated.
			name: "mixed_batch_term_only_the_poison",
			opts: contractOpts{configure: ctAll(ctTerm, ctConfirm), script: map[string][]sinkOutcome{"mx-1": ctPerm}},
			msgs: ids(3, "mx"),
			want: [][]string{at(1, stepsOK, "double_ack"), at(1, stepsDLQ, "confirmed_term"), at(1, stepsOK, "double_ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
					if n := len(f.advisories("MSG_TERMINATED")); n != 1 {
						return fmt.Errorf("%d Terms", n)
					}
					return nil
				})
				if f.advisoriesFor("MSG_TERMINATED", seqs[1]) != 1 {
					t.Error("the Term was not for the poison message")
				}
				ctCounters(t, f.metrics, map[string]float64{"ackConfAttempts": 3, "ackConfSuccesses": 3, "terminated": 1, "acked": 2})
			},
		},
		{
			// The transactional sink has no per-event permanent error, but
			// a malformed message still never reaches it.
			name: "poison_with_transactional_sink",
			opts: contractOpts{configure: ctDLQOn, txSink: true},
			msgs: []ctMsg{{id: "s-0"}, {}, {id: "s-2"}},
			want: [][]string{at(1, stepsOK, "ack"), at(1, stepsDLQNoR, "ack"), at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n, _ := sink.CountStored(f.ob.DB()); n != 2 {
					t.Errorf("stored %d, want 2", n)
				}
			},
		},
	}
}
