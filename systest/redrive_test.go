package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/topology"
)

// An event L1 redrives (receipt.RedriveHeader) makes the edge publish its
// receipt again even though the outbox has it published: L1 never got it.
// A plain copy of an event whose receipt is published does not.
func TestRedrive_EdgeRepublishesPublishedReceipt(t *testing.T) {
	ls := testSystem(t, Options{Configure: func(c *topology.Config) {
		// Copies of an event must not be dropped by L1A's duplicate window.
		c.Topology.Events.DuplicateWindow = topology.Duration(time.Second)
		c.Topology.Receipts.DuplicateWindow = topology.Duration(time.Second)
	}}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	if s, err := js.Stream(context.Background(), "L1A"); err != nil || s.CachedInfo().Config.Duplicates != time.Second {
		t.Fatalf("L1A: %v %+v", err, s)
	}
	ids := publishN(t, js, "rd", 3)
	waitCompleted(t, ls, ids, "edge1")
	edge := ls.App("edge1")
	published := func() float64 { return metricOf(t, edge, "leafline_receipts_published_total", nil) }
	fetched := func() float64 { return metricOf(t, edge, "leafline_messages_fetched_total", nil) }
	acked := func() float64 { return metricOf(t, edge, "leafline_messages_acked_total", nil) }

	send := func(id string, redrive bool) {
		t.Helper()
		m := nats.NewMsg("events.test")
		m.Header.Set(jetstream.MsgIDHeader, id)
		if redrive {
			m.Header.Set(receipt.RedriveHeader, "1")
		}
		m.Data = []byte(`{"k":1}`)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// (A retried publish may answer Duplicate for the copy it stored.)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %q: %v", id, err)
		}
	}
	for _, c := range []struct {
		redrive bool
		want    float64
	}{{false, 0}, {true, 1}} {
		time.Sleep(3 * time.Second) // past the duplicate window of the last copy
		p0, f0, a0 := published(), fetched(), acked()
		send(ids[0], c.redrive)
		check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
			if fetched() < f0+1 {
				var counts []uint64
				for _, sn := range [][2]string{{"l1", "L1A"}, {"hub", "HA"}, {"edge1", "L2A"}} {
					if s, err := jstest.ConnectURL(t, ls.App(sn[0]).ClientURL()).Stream(context.Background(), sn[1]); err == nil {
						counts = append(counts, s.CachedInfo().State.LastSeq)
					}
				}
				ci, _ := jstest.ConnectURL(t, ls.App("edge1").ClientURL()).Consumer(context.Background(), "L2A", "leafline-sink")
				info := ci.CachedInfo()
				return fmt.Errorf("the copy was not fetched yet (last seqs L1A HA L2A %v; sink consumer pending %d ackpending %d delivered %d waiting %d; fetched %v)", counts, info.NumPending, info.NumAckPending, info.Delivered.Stream, info.NumWaiting, fetched())
			}
			return nil
		})
		// The copy's ACK comes after any receipt its batch publishes.
		check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
			if acked() < a0+1 {
				return fmt.Errorf("the copy is not ACKed yet")
			}
			return nil
		})
		if got := published() - p0; got != c.want {
			t.Errorf("redrive=%v: %v receipts published for the copy, want %v", c.redrive, got, c.want)
		}
	}
	// Still applied exactly once at L1.
	if got := leafline.Completions(ls.App("l1")).Stats().Applied; got != uint64(len(ids)) {
		t.Errorf("applied %d, want %d", got, len(ids))
	}
}
