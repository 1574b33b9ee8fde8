package edge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/topology"
)

// Receipts are signed by default in a LocalSystem: L1 records them as
// verified.
func TestSignedReceipts_Verified(t *testing.T) {
	ls := testSystem(t, LocalOptions{}, nil)
	js := clientJS(t, ls.App("l1").ClientURL())
	ids := publishN(t, js, "signed", 20)
	waitCompleted(t, ls, ids, "edge1")
	for _, id := range ids {
		c, err := completionsOf(ls.App("l1")).Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Processors["edge1"].Verified {
			t.Fatalf("event %q: receipt not marked verified: %+v", id, c.Processors["edge1"])
		}
	}
}

// Receipts that an attacker standing at the edge injects into the receipts
// path — unsigned, signed with another key, or a genuine receipt with its
// fields altered — are quarantined at L1 and never applied.
func TestSignedReceipts_ForgedAreQuarantined(t *testing.T) {
	ls := testSystem(t, LocalOptions{}, nil)
	l1 := ls.App("l1")
	svc := completionsOf(l1)
	ejs := clientJS(t, ls.App("edge1").ClientURL())
	ctx := context.Background()

	// A genuine receipt, to tamper with.
	l1js := clientJS(t, l1.ClientURL())
	ids := publishN(t, l1js, "genuine", 1)
	waitCompleted(t, ls, ids, "edge1")
	re, err := ejs.Stream(ctx, "RE")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := re.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	sig := orig.Header.Get(receipt.SignatureHeader)
	if sig == "" {
		t.Fatal("the edge's receipt carries no signature")
	}

	other, _ := nkeys.CreateUser()
	forge := func(id string) []byte {
		r := receipt.New(id, "L1A", "edge1", "edge1", receipt.StatusProcessed, time.Now())
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	otherSig := func(b []byte) string { s, _ := receipt.Sign(other, b); return s }
	altered := strings.Replace(string(orig.Data), `"processed"`, `"dead_lettered"`, 1)
	for _, tc := range []struct {
		name string
		data []byte
		sig  string
	}{
		{"unsigned", forge("forged-unsigned"), ""},
		{"wrong key", forge("forged-other-key"), otherSig(forge("forged-other-key"))},
		{"altered", []byte(altered), sig},
		{"garbage signature", forge("forged-garbage"), "!!!"},
	} {
		m := nats.NewMsg("leafline.receipts.edge1." + tc.name[:1])
		m.Data = tc.data
		m.Header.Set(jetstream.MsgIDHeader, "forged-"+tc.name)
		if tc.sig != "" {
			m.Header.Set(receipt.SignatureHeader, tc.sig)
		}
		if _, err := ejs.PublishMsg(ctx, m); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	// Bundles are verified whole: one signed with another key, one
	// unsigned, and one whose receipts name two sites are each
	// quarantined whole, and none of their receipts is applied.
	otherSigner, err := receipt.NewSigner(other)
	if err != nil {
		t.Fatal(err)
	}
	fromEdge2 := func(id string) []byte {
		b, err := receipt.New(id, "L1A", "edge2", "edge2", receipt.StatusProcessed, time.Now()).Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		recs   [][]byte
		signed bool
	}{
		{"bundle-other-key", [][]byte{forge("forged-b1"), forge("forged-b2")}, true},
		{"bundle-unsigned", [][]byte{forge("forged-b3"), forge("forged-b4")}, false},
		{"bundle-two-sites", [][]byte{forge("forged-b5"), fromEdge2("forged-b6")}, true},
	} {
		body, err := receipt.EncodeBundle(tc.recs)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("leafline.receipts.edge1." + receipt.BundleToken)
		m.Data = body
		m.Header.Set(jetstream.MsgIDHeader, tc.name)
		m.Header.Set(receipt.BundleHeader, fmt.Sprint(len(tc.recs)))
		if tc.signed {
			m.Header.Set(receipt.SignatureHeader, otherSigner.SignBundle(body))
		}
		if _, err := ejs.PublishMsg(ctx, m); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if q := svc.Stats().Quarantined; q < 7 {
			return fmt.Errorf("quarantined %d of 7", q)
		}
		return nil
	})
	for _, id := range []string{"forged-unsigned", "forged-other-key", "forged-garbage",
		"forged-b1", "forged-b2", "forged-b3", "forged-b4", "forged-b5", "forged-b6"} {
		if _, err := svc.Get(ctx, id); err == nil {
			t.Fatalf("forged receipt for %q was applied", id)
		}
	}
	c, err := svc.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Processors["edge1"]; p.Status != receipt.StatusProcessed || p.Conflicts != 0 {
		t.Fatalf("altered receipt changed the record: %+v", p)
	}
	if got := svc.Stats().Applied; got != 1 {
		t.Fatalf("applied %d, want 1", got)
	}
}

// A seed that is not the site's receipt_key stops the edge at startup.
func TestSignedReceipts_WrongSeedRefused(t *testing.T) {
	dir := t.TempDir()
	ls, err := NewLocalSystem(dir, LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	bad := filepath.Join(dir, "wrong.nk")
	if err := os.WriteFile(bad, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	ls.Configs["edge1"].Signing = topology.SigningConfig{KeyFile: bad}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = ls.Start(ctx, "edge1")
	if err == nil || !strings.Contains(err.Error(), "is not this site's receipt_key") || !strings.Contains(err.Error(), bad) {
		t.Fatalf("got %v, want a refusal naming the file", err)
	}
}

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
