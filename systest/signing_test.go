package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/topology"
)

// Receipts are signed by default in a System: L1 records them as
// verified.
func TestSignedReceipts_Verified(t *testing.T) {
	ls := testSystem(t, Options{}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, js, "signed", 20)
	waitCompleted(t, ls, ids, "edge1")
	for _, id := range ids {
		c, err := leafline.Completions(ls.App("l1")).Get(context.Background(), id)
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
	ls := testSystem(t, Options{}, nil)
	l1 := ls.App("l1")
	svc := leafline.Completions(l1)
	ejs := jstest.ConnectURL(t, ls.App("edge1").ClientURL())
	ctx := context.Background()

	// A genuine receipt, to tamper with.
	l1js := jstest.ConnectURL(t, l1.ClientURL())
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
	ls, err := newLocal(dir, Options{})
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
