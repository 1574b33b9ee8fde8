package edge

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// contractCasesDLQPublishFailure: DLQ publish failure: no ACK, no Term, no confirmation attempt.
func contractCasesDLQPublishFailure() []contractCase {
	return []contractCase{
		{
			// The DLQ stream does not exist; the trace hook creates it at
			// the first NAK, and the redelivery completes.
			name: "dlq_stream_missing_holds_until_created",
			opts: contractOpts{configure: ctAll(ctTerm, ctConfirm), dlq: dlqMissing, script: map[string][]sinkOutcome{"dm-0": ctPerm},
				onStep: func(f *contractSite, s ctStep) {
					if s.name == "nak" && s.delivered == 1 {
						if m := ctCounterValues(f.metrics); m["ackConfAttempts"] != 0 || m["terminated"] != 0 || m["acked"] != 0 {
							f.t.Errorf("after a failed DLQ publish: %v", m)
						}
						ctCreateDLQStream(f, 0)
					}
				}},
			msgs: ids(1, "dm"),
			want: [][]string{cat(at(1, "dlq_publish", "nak"), at(2, stepsDLQ, "confirmed_term"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"dlqPublishErrors": 1, "nacked": 1, "ackConfAttempts": 1, "terminated": 1})
				if recs := f.dlqRecords(); len(recs) != 1 || recs[0].Delivered != 2 {
					t.Errorf("DLQ %+v", recs)
				}
				if n := f.advisoriesFor("MSG_TERMINATED", seqs[0]); n != 1 {
					t.Errorf("%d Terms", n)
				}
			},
		},
		{
			// The DLQ stream is full (MaxMsgs 1, DiscardNew); the hook
			// raises its limit at the second NAK.
			name: "dlq_stream_full_holds_until_room",
			opts: contractOpts{configure: ctTerm, dlq: dlqFull, script: map[string][]sinkOutcome{"df-0": ctPerm},
				onStep: func(f *contractSite, s ctStep) {
					if s.name == "nak" && s.delivered == 2 {
						ctCreateDLQStream(f, 10)
					}
				}},
			msgs: ids(1, "df"),
			want: [][]string{cat(at(1, "dlq_publish", "nak"), at(2, "dlq_publish", "nak"), at(3, stepsDLQ, "term"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"dlqPublishErrors": 2, "nacked": 2, "terminated": 1, "acked": 0})
				if n := f.streamMsgCount(f.cfg.DeadLetter.Stream); n != 2 {
					t.Errorf("DLQ holds %d, want filler + 1", n)
				}
				if st := f.outboxStats(); st.Published != 1 || st.Pending != 0 {
					t.Errorf("outbox %+v: the dead_lettered receipt must be committed once, after the DLQ PubAck", st)
				}
			},
		},
		{
			name:    "dlq_publish_failure_left_unacked_with_leave_action",
			opts:    contractOpts{configure: ctAll(ctTerm, func(c *topology.Config) { c.Delivery.Retry.TemporaryFailureAction = "leave_unacked" }), dlq: dlqMissing, script: map[string][]sinkOutcome{"dl-0": ctPerm}},
			msgs:    ids(1, "dl"),
			want:    [][]string{at(1, "dlq_publish", "leave")},
			pending: 1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"dlqPublishErrors": 1, "terminated": 0, "acked": 0, "nacked": 0})
			},
		},

		{
			// The DLQ stream is full: only the poison is held; the rest of
			// the batch commits and is ACKed.
			name: "dlq_failure_in_batch_holds_only_the_poison",
			opts: contractOpts{configure: ctTerm, dlq: dlqFull, script: map[string][]sinkOutcome{"h-1": ctPerm},
				onStep: func(f *contractSite, s ctStep) {
					if s.name == "nak" && s.delivered == 1 {
						ctCreateDLQStream(f, 10)
					}
				}},
			msgs: ids(4, "h"),
			want: [][]string{
				at(1, stepsOK, "ack"),
				cat(at(1, "dlq_publish", "nak"), at(2, stepsDLQ, "term")),
				at(1, stepsOK, "ack"), at(1, stepsOK, "ack"),
			},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.receiptCount(); n != 4 {
					t.Errorf("receipts %d, want 3 processed + 1 dead_lettered", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"dlqPublishErrors": 1, "acked": 3, "terminated": 1})
			},
		},
	}
}

// contractCasesMaxDeliver: max_deliver exhaustion.
func contractCasesMaxDeliver() []contractCase {
	return []contractCase{
		{
			name: "max_deliver_dead_letter",
			opts: contractOpts{configure: ctAll(ctDLQOn, func(c *topology.Config) {
				c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 3, "dead_letter"
			}), script: map[string][]sinkOutcome{"md-0": ctTemp}},
			msgs: ids(1, "md"),
			want: [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, stepsDLQ, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "md-0", "max_deliver", "")
				if r := f.dlqRecords()[0]; r.Delivered != 3 {
					t.Errorf("delivered %d", r.Delivered)
				}
				if rs := f.receiptsInStream(); len(rs) != 1 || rs[0].Status != receipt.StatusDeadLettered || rs[0].Reason != "max_deliver" {
					t.Errorf("receipts %+v", rs)
				}
				ctCounters(t, f.metrics, map[string]float64{"maxDeliverExhausted": 1, "deadLettered": 1, "nacked": 2})
				if n := len(f.advisories("MAX_DELIVERIES")); n != 0 {
					t.Errorf("%d max-deliveries advisories", n)
				}
			},
		},
		{
			name: "max_deliver_leave_counts_the_advisory",
			opts: contractOpts{configure: ctAll(ctDLQOn, func(c *topology.Config) {
				c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 3, "leave"
			}), script: map[string][]sinkOutcome{"ml-0": ctTemp}},
			msgs:    ids(1, "ml"),
			want:    [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, "nak"))},
			pending: -1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
					if n := f.advisoriesFor("MAX_DELIVERIES", seqs[0]); n != 1 {
						return fmt.Errorf("%d max-deliveries advisories", n)
					}
					return nil
				})
				if n := f.streamMsgCount(f.cfg.DeadLetter.Stream); n != 0 {
					t.Errorf("DLQ holds %d", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"maxDeliverExhausted": 1, "deadLettered": 0, "acked": 0, "terminated": 0})
			},
		},
		{
			name: "max_deliver_dead_letter_then_term",
			opts: contractOpts{configure: ctAll(ctTerm, func(c *topology.Config) {
				c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 2, "dead_letter"
			}), script: map[string][]sinkOutcome{"mt-0": ctTemp}},
			msgs: ids(1, "mt"),
			want: [][]string{cat(at(1, "nak"), at(2, stepsDLQ, "term"))},
		},
	}
}

// contractCasesReceiptPublishFailure: receipt publish failure: no ACK, redelivered, completes once.
func contractCasesReceiptPublishFailure() []contractCase {
	return []contractCase{
		{
			name: "receipt_publish_fails_no_ack_then_once",
			opts: contractOpts{wrapPub: failFirst(2)},
			msgs: ids(1, "rf"),
			want: [][]string{cat(
				at(1, "sink_commit", "outbox_commit", "receipt_publish", "nak"),
				at(2, "sink_commit", "outbox_commit", "receipt_publish", "nak"),
				at(3, stepsOK, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.sink.recordsOf("rf-0"); n != 1 {
					t.Errorf("sink records %d", n)
				}
				if st := f.outboxStats(); st.Published != 1 || st.Pending != 0 {
					t.Errorf("outbox %+v", st)
				}
				if n := f.receiptCount(); n != 1 {
					t.Errorf("receipts %d", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"receiptPublishErrors": 2, "acked": 1, "nacked": 2})
			},
		},
		{
			// Real fault: the receipts stream does not exist until the
			// first NAK.
			name: "receipts_stream_missing_until_created",
			opts: contractOpts{noReceiptsStream: true, onStep: func(f *contractSite, s ctStep) {
				if s.name == "nak" && s.delivered == 1 {
					site, _ := f.cfg.Topology.Site(ctSite)
					for _, sc := range jsplan.SitePlan(f.cfg, site).Streams {
						if sc.Name == ctReceipts {
							if _, err := f.client.CreateStream(context.Background(), sc); err != nil {
								f.t.Error(err)
							}
						}
					}
				}
			}},
			msgs: ids(3, "rm"),
			want: repeat(3, cat(at(1, "sink_commit", "outbox_commit", "receipt_publish", "nak"), at(2, stepsOK, "ack"))),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.receiptCount(); n != 3 {
					t.Errorf("receipts %d", n)
				}
			},
		},
		{
			// A dead letter whose dead_lettered receipt is not PubAck'ed is
			// redelivered and dead-lettered again: the DLQ stream keeps
			// one record (Nats-Msg-Id).
			name: "redelivered_dead_letter_single_dlq_record",
			opts: contractOpts{configure: ctTerm, wrapPub: failFirst(1), script: map[string][]sinkOutcome{"rd-0": ctPerm}},
			msgs: ids(1, "rd"),
			want: [][]string{cat(
				at(1, "dlq_publish", "dlq_puback", "outbox_commit", "receipt_publish", "nak"),
				at(2, stepsDLQ, "term"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if recs := f.dlqRecords(); len(recs) != 1 || recs[0].Delivered != 1 {
					t.Errorf("DLQ %+v, want one record from delivery 1", recs)
				}
				if n := f.receiptCount(); n != 1 {
					t.Errorf("receipts %d", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"terminated": 1, "dlqPublishErrors": 0, "receiptPublishErrors": 1})
			},
		},
	}
}

// contractCasesInProgress: InProgress heartbeats during a slow sink.
func contractCasesInProgress() []contractCase {
	return []contractCase{
		{
			name: "in_progress_heartbeats_prevent_redelivery",
			opts: ctSlowSink(true),
			msgs: ids(1, "ip"),
			want: [][]string{at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if ci := f.consumerInfo(); ci.NumRedelivered != 0 || ci.AckFloor.Stream != seqs[0] {
					t.Errorf("consumer %+v", ci)
				}
				wpi := len(f.wireOf(seqs[0], true)) - len(f.wireOf(seqs[0], false))
				if wpi < 4 {
					t.Errorf("%d InProgress heartbeats during a 2.5s write with a 250ms interval", wpi)
				}
			},
		},
		{
			// Control for the case above: without heartbeats the same slow
			// write lets the server redeliver the message (the probe gets it).
			name: "slow_sink_without_in_progress_is_redelivered",
			opts: ctSlowSink(false),
			msgs: ids(1, "ip"),
			want: [][]string{at(1, stepsOK, "ack")},
		},
	}
}

// contractCasesShutdown: shutdown.
func contractCasesShutdown() []contractCase {
	return []contractCase{
		{
			// The runner is cancelled while the sink write runs: the batch
			// finishes (its work is durable, so it is ACKed), and nothing
			// else is fetched.
			name:    "shutdown_mid_batch_finishes_then_stops",
			opts:    ctShutdownSink(),
			msgs:    ids(3, "sd"),
			want:    [][]string{at(1, stepsOK, "ack"), nil, nil},
			pending: -1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ci := f.consumerInfo()
				if ci.NumAckPending != 0 || ci.NumPending != 2 || ci.AckFloor.Stream != seqs[0] {
					t.Errorf("consumer ack pending %d, pending %d, floor %d: want 0, 2, %d",
						ci.NumAckPending, ci.NumPending, ci.AckFloor.Stream, seqs[0])
				}
			},
		},
		{
			name: "shutdown_mid_batch_failed_write_not_acked",
			opts: func() contractOpts {
				o := ctShutdownSink()
				o.script = map[string][]sinkOutcome{"sd-0": ctTemp}
				return o
			}(),
			msgs:    ids(3, "sd"),
			want:    [][]string{at(1, "nak"), nil, nil},
			pending: -1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ci := f.consumerInfo()
				if ci.AckFloor.Stream != 0 || ci.NumPending+uint64(ci.NumAckPending) != 3 {
					t.Errorf("consumer %+v: nothing may be ACKed", ci)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 0})
			},
		},
	}
}
