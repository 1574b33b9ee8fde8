package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipts"
)

// A publish that fails part-way names what it stored: here the receipts
// stream holds 3 messages, the first receipt is already in it (so the
// atomic batch is refused and the receipts go one by one), two more fit
// and two do not.
func TestReceiptPublisher_NamesWhatAFailedPublishStored(t *testing.T) {
	f := newContractSite(t, contractOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	re, err := f.client.Stream(ctx, "RE")
	if err != nil {
		t.Fatal(err)
	}
	cfg := re.CachedInfo().Config
	cfg.MaxMsgs = 3
	if _, err := f.client.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	recs := make([]outbox.Record, 5)
	for i := range recs {
		if recs[i], err = f.receiptRecord(fmt.Sprintf("part-%d", i), receipts.StatusProcessed, ""); err != nil {
			t.Fatal(err)
		}
	}
	p := &receiptPublisher{js: f.client}
	if err := p.Publish(ctx, recs[:1]); err != nil {
		t.Fatal(err)
	}
	err = p.Publish(ctx, recs)
	if !errors.Is(err, ErrReceiptPublish) {
		t.Fatalf("Publish = %v, want ErrReceiptPublish", err)
	}
	got := outbox.PartiallyPublished(recs, err)
	want := []outbox.Record{recs[0], recs[1], recs[2]}
	if !slices.EqualFunc(got, want, func(a, b outbox.Record) bool { return a.Key == b.Key }) {
		t.Fatalf("PubAck'ed %d records (%v), want the first 3", len(got), err)
	}
	info, err := re.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 {
		t.Fatalf("RE holds %d messages, want 3", info.State.Msgs)
	}
}
