package edge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"
)

// Receipts published together for the first time are one bundle, signed
// once: the bundle verifies against the site's key, and the same body with
// one receipt altered does not; a receipt published alone carries its own
// signature.
func TestReceiptPublisher_SignsBundles(t *testing.T) {
	f := newContractSite(t, contractOpts{})
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	p := &receiptPublisher{js: f.client, signer: kp}
	const n = 5
	recs := make([]outbox.Record, n+1)
	for i := range recs {
		rec, err := f.receiptRecord(fmt.Sprintf("bundle-%d", i), receipt.StatusProcessed, "")
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = rec
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.PublishFirst(ctx, recs[:n], []bool{true, true, true, true, true}); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, recs[n:]); err != nil {
		t.Fatal(err)
	}
	re, err := f.client.Stream(ctx, "RE")
	if err != nil {
		t.Fatal(err)
	}
	v := receipt.NewVerifier()
	b, err := re.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !receipt.IsBundle(b.Header) || b.Header.Get(receipt.SignatureHeader) == "" {
		t.Fatalf("message 1: headers %v, want a signed bundle", b.Header)
	}
	raws, err := receipt.Unbundle(b.Data, b.Header)
	if err != nil || len(raws) != n {
		t.Fatalf("bundle holds %d receipts (%v), want %d", len(raws), err, n)
	}
	if err := v.VerifyMsg(pub, b.Data, b.Header); err != nil {
		t.Fatalf("bundle: %v", err)
	}
	altered := []byte(strings.Replace(string(b.Data), `"processed"`, `"dead_lettered"`, 1))
	if err := v.VerifyMsg(pub, altered, b.Header); !errors.Is(err, receipt.ErrBadSignature) {
		t.Fatalf("altered bundle: got %v, want ErrBadSignature", err)
	}
	// The bundle's signature does not pass for one of its receipts alone.
	if err := v.Verify(pub, raws[0], b.Header.Get(receipt.SignatureHeader), ""); !errors.Is(err, receipt.ErrBadSignature) {
		t.Fatalf("receipt under its bundle's signature: got %v, want ErrBadSignature", err)
	}
	one, err := re.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if receipt.IsBundle(one.Header) || one.Header.Get(jetstream.MsgIDHeader) != recs[n].Key {
		t.Fatalf("message 2: headers %v, want receipt %s alone", one.Header, recs[n].Key)
	}
	if err := v.VerifyMsg(pub, one.Data, one.Header); err != nil {
		t.Fatalf("single receipt: %v", err)
	}
}
