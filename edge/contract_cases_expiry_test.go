package edge

import (
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology"
)

// stepsExpired are the steps of an event expired before the sink: its
// expired receipt committed and PubAck'ed, then the final action.
var stepsExpired = []string{"expired", "outbox_commit", "receipt_publish", "receipt_puback"}

// ctExpireTest gives events.test an expire_after of d.
func ctExpireTest(d time.Duration) func(*topology.Config) {
	return func(c *topology.Config) {
		c.Topology.Events.ExpireAfter = []topology.ExpireRule{{Subject: "events.test", After: topology.Duration(d)}}
	}
}

// publishedAgo is a Leafline-Published-At header d ago.
func publishedAgo(d time.Duration) map[string]string {
	return map[string]string{receipt.PublishedAtHeader: time.Now().Add(-d).UTC().Format(time.RFC3339Nano)}
}

// ctReceiptsByID are the receipts in the receipts stream by event_id.
func ctReceiptsByID(f *contractSite) map[string][]receipt.Receipt {
	out := map[string][]receipt.Receipt{}
	for _, r := range f.receiptsInStream() {
		out[r.EventID] = append(out[r.EventID], r)
	}
	return out
}

// contractCasesExpiry: events older than their expiry when the runner
// reaches them are never handed to the sink; each gets an expired receipt
// and is ACKed only after that receipt's PubAck.
func contractCasesExpiry() []contractCase {
	return []contractCase{
		{
			name: "expired_not_handed_to_sink_acked_after_receipt_puback",
			opts: contractOpts{configure: ctExpireTest(time.Hour)},
			msgs: []ctMsg{{id: "x-0", header: publishedAgo(2 * time.Hour)}, {id: "x-1"}},
			want: [][]string{at(1, stepsExpired, "ack"), at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.sink.callsOf("x-0"); n != 0 {
					t.Errorf("the sink saw the expired event %d times", n)
				}
				rs := ctReceiptsByID(f)
				if x := rs["x-0"]; len(x) != 1 || x[0].Status != receipt.StatusExpired || !strings.HasPrefix(x[0].Reason, "deadline ") {
					t.Errorf("receipts of x-0 %+v, want one expired with its deadline", x)
				}
				if x := rs["x-1"]; len(x) != 1 || x[0].Status != receipt.StatusProcessed {
					t.Errorf("receipts of x-1 %+v, want one processed", x)
				}
				ctCounters(t, f.metrics, map[string]float64{"expired": 1, "processed": 1, "acked": 2, "deadLettered": 0})
			},
		},
		{
			name: "expires_at_header_without_rule",
			msgs: []ctMsg{{id: "xa-0", header: map[string]string{receipt.ExpiresAtHeader: time.Now().Add(-time.Second).UTC().Format(time.RFC3339)}}},
			want: [][]string{at(1, stepsExpired, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if rs := ctReceiptsByID(f)["xa-0"]; len(rs) != 1 || rs[0].Status != receipt.StatusExpired {
					t.Errorf("receipts %+v, want one expired", rs)
				}
			},
		},
		{
			name: "expired_receipt_publish_fails_no_ack_then_once",
			opts: contractOpts{configure: ctExpireTest(time.Hour), wrapPub: failFirst(1)},
			msgs: []ctMsg{{id: "xf-0", header: publishedAgo(2 * time.Hour)}},
			want: [][]string{cat(at(1, "expired", "outbox_commit", "receipt_publish", "nak"), at(2, stepsExpired, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.sink.callsOf("xf-0"); n != 0 {
					t.Errorf("the sink saw the expired event %d times", n)
				}
				if st := f.outboxStats(); st.Published != 1 || st.Pending != 0 {
					t.Errorf("outbox %+v, want the one expired receipt published", st)
				}
				if rs := ctReceiptsByID(f)["xf-0"]; len(rs) != 1 || rs[0].Status != receipt.StatusExpired {
					t.Errorf("receipts %+v, want one expired", rs)
				}
				ctCounters(t, f.metrics, map[string]float64{"expired": 1, "acked": 1, "nacked": 1, "processed": 0})
			},
		},
		{
			// Processed (receipt committed) but not ACKed before the
			// deadline: the redelivery after it finds the processed
			// receipt and stays processed, never also expired.
			name: "processed_before_deadline_stays_processed_on_late_redelivery",
			// The deadline counts from the event's store in the case's own
			// stream (it carries no publish time): 4s, then a redelivery
			// 6s after the first.
			opts: contractOpts{configure: func(c *topology.Config) {
				ctExpireTest(4 * time.Second)(c)
				ctFixedBackoff(6000)(c)
			}, wrapPub: failFirst(1)},
			msgs: []ctMsg{{id: "xp-0"}},
			want: [][]string{cat(at(1, "sink_commit", "outbox_commit", "receipt_publish", "nak"), at(2, stepsOK, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if rs := ctReceiptsByID(f)["xp-0"]; len(rs) != 1 || rs[0].Status != receipt.StatusProcessed {
					t.Errorf("receipts %+v, want one processed", rs)
				}
				ctCounters(t, f.metrics, map[string]float64{"expired": 0, "processed": 1})
			},
		},
		{
			name: "bad_expiry_header_dead_lettered",
			opts: contractOpts{configure: ctDLQOn},
			msgs: []ctMsg{{id: "xb-0", header: map[string]string{receipt.ExpireAfterHeader: "soon"}}},
			want: [][]string{at(1, stepsDLQ, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if recs := f.dlqRecords(); len(recs) != 1 || recs[0].ErrorType != "bad_expiry_header" {
					t.Errorf("DLQ records %+v, want one bad_expiry_header", recs)
				}
				if rs := ctReceiptsByID(f)["xb-0"]; len(rs) != 1 || rs[0].Status != receipt.StatusDeadLettered || rs[0].Reason != "bad_expiry_header" {
					t.Errorf("receipts %+v, want one dead_lettered", rs)
				}
				if n := f.sink.callsOf("xb-0"); n != 0 {
					t.Errorf("the sink saw the event %d times", n)
				}
			},
		},
	}
}
