package completion_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
)

// TestService_HeldBoundedPerSite: a site that reports many events L1 has
// never seen holds at most its bound of receipts (by count, or by bytes):
// past it, its oldest held events are quarantined (refusal held_limit),
// counted, and their records removed, while genuine receipts, of the same
// site and of another, complete as usual and another site's held receipt
// stays held until its origin arrives.
func TestService_HeldBoundedPerSite(t *testing.T) {
	const forged, bound = 40, 5
	size := heldReceiptSize(t)
	for _, tt := range []struct {
		name     string
		receipts int
		bytes    int64
	}{
		{"by count", bound, -1},
		{"by bytes", -1, int64(bound)*size + size/2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			svc, js := completiontest.StartTracking(t, func(c *completion.ServiceConfig) {
				c.HeldMaxPerSite, c.HeldMaxBytesPerSite = tt.receipts, tt.bytes
				c.ApplyBatch, c.BatchSize = state.ServiceApplyBatch, state.ServiceBatchSize
				js := c.JS
				c.OpenState = func(ctx context.Context) (record.State, error) {
					return state.Open(ctx, state.Config{JS: js, Path: filepath.Join(dir, "completion.db"), ImportBucket: "-",
						Sites: c.Sites, HoldUntilOrigin: true, Logger: completiontest.QuietLog})
				}
			})
			ctx := jstest.Ctx(t)
			// edge-2 reports an event before L1 has seen it: held, its own bound.
			completiontest.SendReceipt(t, js, "early", "edge-2", receipt.StatusProcessed)
			completiontest.WaitStatus(t, svc, "early", record.EventOriginUnknown)
			var genuine []string
			for i := range forged {
				completiontest.SendReceipt(t, js, fmt.Sprintf("forged-%02d", i), "edge-1", receipt.StatusProcessed)
				if i%10 == 0 {
					id := fmt.Sprintf("real-%d", i)
					completiontest.PublishEvent(t, js, "events.a."+id, id)
					// Seen first: a receipt for it is not held.
					completiontest.WaitStatus(t, svc, id, record.EventPending)
					completiontest.SendReceipt(t, js, id, "edge-1", receipt.StatusProcessed)
					completiontest.SendReceipt(t, js, id, "edge-2", receipt.StatusProcessed)
					genuine = append(genuine, id)
				}
			}
			check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
				if st := svc.Stats(); st.HeldLimited != forged-bound {
					return fmt.Errorf("held limited %d, want %d (stats %+v)", st.HeldLimited, forged-bound, st)
				}
				return nil
			})
			for _, id := range genuine {
				completiontest.WaitStatus(t, svc, id, record.EventComplete)
			}
			// What the State holds: edge-2's, and bound forged events, each
			// newer than every one quarantined (by the time L1 received
			// it, then by event_id).
			held, err := svc.State().HeldEvents(ctx, 1000)
			if err != nil {
				t.Fatal(err)
			}
			var kept []heldAt
			for _, c := range held {
				if c.EventID != "early" {
					kept = append(kept, heldAt{c.Held["edge-1"].ReceivedAt, c.EventID})
				}
			}
			if len(kept) != bound || len(held) != bound+1 {
				t.Fatalf("%d events held, %d of them forged; want %d forged and early", len(held), len(kept), bound)
			}
			gone := quarantinedAt(t, js)
			if len(gone) != forged-bound {
				t.Fatalf("%d quarantined, want %d", len(gone), forged-bound)
			}
			if newest, oldest := slices.MaxFunc(gone, heldAt.compare), slices.MinFunc(kept, heldAt.compare); newest.compare(oldest) >= 0 {
				t.Fatalf("quarantined %v is not older than kept %v", newest, oldest)
			}
			if u := svc.HeldBySite()["edge-1"]; u.Receipts != bound || (tt.bytes > 0 && u.Bytes > tt.bytes) {
				t.Fatalf("edge-1 holds %+v, want %d receipts within %d bytes", u, bound, tt.bytes)
			}
			if got := svc.Refusals()[completion.RefusedHeldLimit]; got != forged-bound {
				t.Fatalf("refusals %v", svc.Refusals())
			}
			reasons := quarantineReasons(t, js)
			if len(reasons) != forged-bound || !strings.HasPrefix(reasons[0], "held_limit: site edge-1 held more than its bound") {
				t.Fatalf("%d quarantine records, the first %q", len(reasons), reasons[0])
			}
			// edge-2's held receipt was not its neighbour's to lose.
			completiontest.PublishEvent(t, js, "events.a.early", "early")
			if c := completiontest.WaitStatus(t, svc, "early", record.EventPending); c.Processors["edge-2"].Status != receipt.StatusProcessed {
				t.Fatalf("early after its origin: %+v", c)
			}
			completiontest.SendReceipt(t, js, "early", "edge-1", receipt.StatusProcessed)
			completiontest.WaitStatus(t, svc, "early", record.EventComplete)
		})
	}
}

// heldAt orders held receipts as the bound evicts them.
type heldAt struct {
	at time.Time
	id string
}

func (a heldAt) compare(b heldAt) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// quarantinedAt returns the receipts of the quarantine records.
func quarantinedAt(t *testing.T, js jetstream.JetStream) []heldAt {
	t.Helper()
	var out []heldAt
	for _, rec := range quarantineRecords(t, js) {
		r, err := receipt.Decode(rec.Receipt)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, heldAt{rec.ReceivedAt, r.EventID})
	}
	return out
}

// heldReceiptSize is the size a forged receipt of the test counts for.
func heldReceiptSize(t *testing.T) int64 {
	t.Helper()
	r := receipt.New("forged-00", "L1A", "edge-1", "edge-1", receipt.StatusProcessed, time.Now())
	r = receipt.Receipt{Version: r.Version, ReceiptID: r.ReceiptID, EventID: r.EventID, OriginStream: r.OriginStream,
		Processor: r.Processor, Site: r.Site, Status: r.Status, ProcessedAt: r.ProcessedAt}
	data, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(data))
}
