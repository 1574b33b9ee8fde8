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

// Receipts of first publish are bundled by class lane, each bundle on
// its lane's subject, a lane with one receipt sending it alone; on a
// capped link a bundle holds a quarter of a second's worth at most.
func TestReceiptPublisher_BundlesByLane(t *testing.T) {
	rec := func(i int, class string) outbox.Record {
		return outbox.Record{Key: fmt.Sprintf("k%d", i), Subject: receipt.ClassSubject("r.e.processed", class), Data: make([]byte, 100)}
	}
	recs := []outbox.Record{rec(0, ""), rec(1, "urgent"), rec(2, ""), rec(3, "urgent"), rec(4, "low"), rec(5, "")}
	first := []bool{true, true, true, true, true, true}
	p := &receiptPublisher{prefix: "r"}
	bs, err := p.messages(recs, first)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range bs {
		got = append(got, fmt.Sprintf("%s %v", b.msg.Subject, b.recs))
	}
	want := []string{"r.e.processed.low [4]", "r.e.bundle [0 2 5]", "r.e.bundle.urgent [1 3]"}
	if !slices.Equal(got, want) {
		t.Errorf("messages %q, want %q", got, want)
	}

	p.maxBytes = bundleBytes(1000) // 250 bytes: two receipts of 100
	bs, err = p.messages(recs[:3:3], []bool{true, false, true})
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[1].msg.Subject != "r.e.bundle" || len(bs[1].recs) != 2 {
		t.Errorf("capped: %d messages", len(bs))
	}
	many := make([]outbox.Record, 5)
	for i := range many {
		many[i] = rec(i, "")
	}
	if bs, _ = p.messages(many, []bool{true, true, true, true, true}); len(bs) != 3 {
		t.Errorf("5 receipts of 100 bytes under a 250-byte bound make %d bundles, want 3", len(bs))
	}
	if bundleBytes(0) != 0 || bundleBytes(1<<30) != receipt.MaxBundleBytes {
		t.Errorf("bundleBytes: %d, %d", bundleBytes(0), bundleBytes(1<<30))
	}
}
