package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"
)

// A publish that fails part-way names what it stored: receipts published
// for the first time go in several bundles; the first bundle is already in the stream (so the
// atomic batch is refused and the bundles go one by one), the second fits
// and the rest do not.
func TestReceiptPublisher_NamesWhatAFailedPublishStored(t *testing.T) {
	f := newContractSite(t, contractOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	re, err := f.client.Stream(ctx, "RE")
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]outbox.Record, 3*receipt.MaxBundleReceipts)
	for i := range recs {
		if recs[i], err = f.receiptRecord(fmt.Sprintf("part-%d", i), receipt.StatusProcessed, ""); err != nil {
			t.Fatal(err)
		}
	}
	p := &receiptPublisher{js: f.client}
	first := make([]bool, len(recs))
	for i := range first {
		first[i] = true
	}
	bs, err := p.messages(recs, first)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) < 3 {
		t.Fatalf("%d records make %d bundles, want at least 3", len(recs), len(bs))
	}
	if err := p.PublishFirst(ctx, recs[:len(bs[0].recs)], first); err != nil {
		t.Fatal(err)
	}
	cfg := re.CachedInfo().Config
	cfg.MaxMsgs = 2
	if _, err := f.client.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	err = p.PublishFirst(ctx, recs, first)
	if !errors.Is(err, ErrReceiptPublish) {
		t.Fatalf("Publish = %v, want ErrReceiptPublish", err)
	}
	got := outbox.PartiallyPublished(recs, err)
	want := recs[:len(bs[0].recs)+len(bs[1].recs)]
	if !slices.EqualFunc(got, want, func(a, b outbox.Record) bool { return a.Key == b.Key }) {
		t.Fatalf("PubAck'ed %d records (%v), want the first two bundles' %d", len(got), err, len(want))
	}
	info, err := re.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("RE holds %d messages, want 2", info.State.Msgs)
	}
}
