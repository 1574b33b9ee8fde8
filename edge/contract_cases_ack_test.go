package edge

import (
	"context"
	"testing"
	"time"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// contractCasesSuccess: success: ordinary ACK only after the outbox commit and the receipt PubAck.
func contractCasesSuccess() []contractCase {
	return []contractCase{
		{
			name: "success_ordinary_ack",
			msgs: ids(1, "ok"),
			want: [][]string{at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ci := f.consumerInfo()
				if ci.AckFloor.Stream != seqs[0] || ci.NumRedelivered != 0 {
					t.Errorf("ack floor %d redelivered %d, want %d and 0", ci.AckFloor.Stream, ci.NumRedelivered, seqs[0])
				}
				rs := f.receiptsInStream()
				if len(rs) != 1 || rs[0].EventID != "ok-0" || rs[0].Status != receipt.StatusProcessed || rs[0].Processor != ctSite {
					t.Errorf("receipts %+v", rs)
				}
				if st := f.outboxStats(); st.Pending != 0 || st.Published != 1 {
					t.Errorf("outbox %+v, want 1 published", st)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 1, "processed": 1, "nacked": 0, "terminated": 0, "receiptsPublished": 1, "ackConfAttempts": 0})
			},
		},
		{
			name: "success_batch_one_receipt_batch",
			msgs: ids(8, "b"),
			want: repeat(8, at(1, stepsOK, "ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if b := f.sink.writeBatches(); len(b) != 1 || len(b[0]) != 8 {
					t.Errorf("sink batches %v, want one batch of 8", b)
				}
				if n := f.receiptCount(); n != 8 {
					t.Errorf("receipts stream holds %d, want 8", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 8, "receiptsPublished": 8, "fetched": 8})
			},
		},
		{
			name: "success_confirmed_ack",
			opts: contractOpts{configure: ctConfirm},
			msgs: ids(3, "c"),
			want: repeat(3, at(1, stepsOK, "double_ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"acked": 3, "ackConfAttempts": 3, "ackConfSuccesses": 3, "ackConfTimeouts": 0, "ackConfFailures": 0, "ackConfUnsupported": 0})
				if n := ctHistCount(t, f.metrics.ackConfSeconds); n != 3 {
					t.Errorf("ack_confirmation_seconds count %d, want 3", n)
				}
			},
		},
		{
			name: "success_transactional_store_sink",
			opts: contractOpts{txSink: true},
			msgs: ids(3, "tx"),
			want: repeat(3, at(1, stepsOK, "ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n, err := sink.CountStored(f.ob.DB()); err != nil || n != 3 {
					t.Errorf("store sink holds %d (%v), want 3", n, err)
				}
			},
		},
		{
			name: "success_event_id_from_json_field",
			opts: contractOpts{configure: ctJSONID},
			msgs: []ctMsg{{data: []byte(`{"event_id":"json-1","k":2}`)}},
			want: [][]string{at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if rs := f.receiptsInStream(); len(rs) != 1 || rs[0].EventID != "json-1" {
					t.Errorf("receipts %+v", rs)
				}
			},
		},
		{
			// Two stream messages carry one event_id (json_field mode: the
			// stream cannot dedupe them): one outbox record, one receipt,
			// both messages ACKed.
			name: "duplicate_event_id_in_one_batch",
			opts: contractOpts{configure: ctJSONID},
			msgs: []ctMsg{{data: []byte(`{"event_id":"twice"}`)}, {data: []byte(`{"event_id":"twice","again":true}`)}},
			want: repeat(2, at(1, stepsOK, "ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.receiptCount(); n != 1 {
					t.Errorf("receipts stream holds %d, want 1", n)
				}
				if st := f.outboxStats(); st.Pending+st.Published != 1 {
					t.Errorf("outbox %+v, want exactly one record", st)
				}
				if n := f.sink.recordsOf("twice"); n != 1 {
					t.Errorf("sink records %d, want 1", n)
				}
			},
		},
		{
			// A previous life of the box processed the event and PubAck'ed
			// its receipt, then crashed before the ACK: the redelivery finds
			// the outbox record, publishes nothing and ACKs.
			name: "redelivery_of_processed_event_acks_without_second_record",
			msgs: ids(1, "again"),
			opts: contractOpts{before: func(t *testing.T, f *contractSite) {
				rec, err := f.receiptRecord("again-0", receipt.StatusProcessed, "")
				if err != nil {
					t.Fatal(err)
				}
				stored, err := f.ob.Commit([]outbox.Record{rec}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.pub.Publish(context.Background(), stored); err != nil {
					t.Fatal(err)
				}
				if err := f.ob.MarkPublished([]string{rec.Key}); err != nil {
					t.Fatal(err)
				}
			}},
			want: [][]string{at(1, "sink_commit", "outbox_commit", "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.receiptCount(); n != 1 {
					t.Errorf("receipts stream holds %d, want 1", n)
				}
				if st := f.outboxStats(); st.Pending != 0 || st.Published != 1 {
					t.Errorf("outbox %+v, want the one published record", st)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 1, "receiptsPublished": 0})
			},
		},
		{
			// The previous life committed the receipt but crashed before
			// its PubAck: the redelivery publishes the pending record.
			name: "redelivery_with_pending_receipt_publishes_it",
			msgs: ids(1, "pend"),
			opts: contractOpts{before: func(t *testing.T, f *contractSite) {
				rec, err := f.receiptRecord("pend-0", receipt.StatusProcessed, "")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.ob.Commit([]outbox.Record{rec}, nil); err != nil {
					t.Fatal(err)
				}
			}},
			want: [][]string{at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if st := f.outboxStats(); st.Pending != 0 || st.Published != 1 {
					t.Errorf("outbox %+v", st)
				}
				if n := f.receiptCount(); n != 1 {
					t.Errorf("receipts stream holds %d, want 1", n)
				}
			},
		},

		{
			// A previous life published a receipt but lost its PubAck (the
			// record is still pending). The next batch carries it with a
			// new receipt: the atomic batch is refused for the duplicate
			// and the publisher falls back to one-by-one publishes.
			name: "lost_puback_duplicate_in_atomic_receipt_batch",
			msgs: []ctMsg{{id: "lost-0"}, {id: "new-1"}, {id: "new-2"}},
			opts: contractOpts{before: func(t *testing.T, f *contractSite) {
				rec, err := f.receiptRecord("lost-0", receipt.StatusProcessed, "")
				if err != nil {
					t.Fatal(err)
				}
				stored, err := f.ob.Commit([]outbox.Record{rec}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.pub.Publish(context.Background(), stored); err != nil {
					t.Fatal(err)
				}
			}},
			want: repeat(3, at(1, stepsOK, "ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.receiptCount(); n != 3 {
					t.Errorf("receipts stream holds %d, want 3", n)
				}
				if st := f.outboxStats(); st.Published != 3 || st.Pending != 0 {
					t.Errorf("outbox %+v", st)
				}
			},
		},
	}
}

// contractCasesTemporary: temporary failures: NAK with the computed delay, or leave; never DLQ, never Term.
func contractCasesTemporary() []contractCase {
	return []contractCase{
		{
			name: "temporary_nak_fixed_backoff",
			opts: contractOpts{configure: ctFixedBackoff(400), script: map[string][]sinkOutcome{"t-0": {sinkTemp, sinkTemp, sinkOK}}},
			msgs: ids(1, "t"),
			want: [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, stepsOK, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctNakDelays(t, f.stepsOf(seqs[0]), []time.Duration{400 * time.Millisecond, 400 * time.Millisecond})
				if n := f.advisoriesFor("MSG_NAKED", seqs[0]); n != 2 {
					t.Errorf("server saw %d NAKs, want 2", n)
				}
				if ci := f.consumerInfo(); ci.NumRedelivered != 0 || ci.AckFloor.Stream != seqs[0] {
					t.Errorf("consumer %+v", ci)
				}
				if n := f.sink.recordsOf("t-0"); n != 1 {
					t.Errorf("sink records %d", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"nacked": 2, "acked": 1, "redeliveries": 2, "deadLettered": 0})
			},
		},
		{
			name: "temporary_nak_exponential_backoff",
			opts: contractOpts{configure: func(c *topology.Config) {
				c.Delivery.Retry.Mode, c.Delivery.Retry.Jitter = "exponential", "none"
				c.Delivery.Retry.BackoffMS, c.Delivery.Retry.BackoffMaxMS = 150, 500
			}, script: map[string][]sinkOutcome{"x-0": {sinkTemp, sinkTemp, sinkTemp, sinkOK}}},
			msgs: ids(1, "x"),
			want: [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, "nak"), at(4, stepsOK, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				// 150ms, 300ms, then capped at 500ms.
				ctNakDelays(t, f.stepsOf(seqs[0]), []time.Duration{150 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond})
			},
		},
		{
			name: "temporary_leave_unacked_redelivered_after_ack_wait",
			opts: contractOpts{configure: ctAll(ctAckWait1s, func(c *topology.Config) { c.Delivery.Retry.TemporaryFailureAction = "leave_unacked" }),
				script: map[string][]sinkOutcome{"l-0": {sinkTemp, sinkOK}}},
			msgs: ids(1, "l"),
			want: [][]string{cat(at(1, "leave"), at(2, stepsOK, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ss := f.stepsOf(seqs[0])
				if gap := ss[1].at.Sub(ss[0].at); gap < 700*time.Millisecond {
					t.Errorf("redelivered %s after leave, before AckWait (1s)", gap)
				}
				if n := f.advisoriesFor("MSG_NAKED", seqs[0]); n != 0 {
					t.Errorf("server saw %d NAKs, want 0", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"nacked": 0, "acked": 1})
			},
		},
		{
			name: "temporary_never_dead_lettered_nor_terminated",
			opts: contractOpts{configure: ctAll(ctTerm, ctConfirm), script: map[string][]sinkOutcome{"nt-0": {sinkTemp, sinkTemp, sinkOK}}},
			msgs: ids(1, "nt"),
			want: [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, stepsOK, "double_ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.streamMsgCount(f.cfg.DeadLetter.Stream); n != 0 {
					t.Errorf("DLQ holds %d", n)
				}
				if n := len(f.advisories("MSG_TERMINATED")); n != 0 {
					t.Errorf("server saw %d Terms", n)
				}
				// NAKs are never confirmed; only the final ACK is.
				ctCounters(t, f.metrics, map[string]float64{"ackConfAttempts": 1, "ackConfSuccesses": 1, "terminated": 0, "deadLettered": 0})
			},
		},
		{
			name: "temporary_in_batch_only_that_message_naks",
			opts: contractOpts{script: map[string][]sinkOutcome{"m-2": {sinkTemp, sinkOK}}},
			msgs: ids(5, "m"),
			want: [][]string{
				at(1, stepsOK, "ack"), at(1, stepsOK, "ack"),
				cat(at(1, "nak"), at(2, stepsOK, "ack")),
				at(1, stepsOK, "ack"), at(1, stepsOK, "ack"),
			},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.receiptCount(); n != 5 {
					t.Errorf("receipts %d, want 5", n)
				}
			},
		},
	}
}
