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
	"github.com/leafline/leafline/receipts"
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
		c, err := ls.App("l1").Completions().Get(context.Background(), id)
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
	svc := l1.Completions()
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
	sig := orig.Header.Get(receipts.SignatureHeader)
	if sig == "" {
		t.Fatal("the edge's receipt carries no signature")
	}

	other, _ := nkeys.CreateUser()
	forge := func(id string) []byte {
		r := receipts.New(id, "L1A", "edge1", "edge1", receipts.StatusProcessed, time.Now())
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	otherSig := func(b []byte) string { s, _ := receipts.Sign(other, b); return s }
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
			m.Header.Set(receipts.SignatureHeader, tc.sig)
		}
		if _, err := ejs.PublishMsg(ctx, m); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if q := svc.Stats().Quarantined; q < 4 {
			return fmt.Errorf("quarantined %d of 4", q)
		}
		return nil
	})
	for _, id := range []string{"forged-unsigned", "forged-other-key", "forged-garbage"} {
		if _, err := svc.Get(ctx, id); err == nil {
			t.Fatalf("forged receipt for %q was applied", id)
		}
	}
	c, err := svc.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Processors["edge1"]; p.Status != receipts.StatusProcessed || p.Conflicts != 0 {
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

// A chunk of receipts is published as one signed batch: each receipt
// carries the batch signature and its proof, every one verifies against
// the site's key, and a receipt swapped into another's proof does not.
func TestReceiptPublisher_SignsBatches(t *testing.T) {
	f := newContractSite(t, contractOpts{})
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	p := &receiptPublisher{js: f.client, signer: kp}
	const n = 5
	recs := make([]outbox.Record, n)
	for i := range recs {
		rec, err := f.receiptRecord(fmt.Sprintf("batch-%d", i), receipts.StatusProcessed, "")
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = rec
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Publish(ctx, recs); err != nil {
		t.Fatal(err)
	}
	re, err := f.client.Stream(ctx, "RE")
	if err != nil {
		t.Fatal(err)
	}
	v := receipts.NewVerifier()
	var msgs []*jetstream.RawStreamMsg
	for seq := uint64(1); seq <= n; seq++ {
		m, err := re.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
		sig, proof := m.Header.Get(receipts.SignatureHeader), m.Header.Get(receipts.ProofHeader)
		if sig == "" || proof == "" {
			t.Fatalf("receipt %d: signature %q, proof %q: want both", seq, sig, proof)
		}
		if sig != msgs[0].Header.Get(receipts.SignatureHeader) {
			t.Fatalf("receipt %d: not the batch's signature", seq)
		}
		if err := v.Verify(pub, m.Data, sig, proof); err != nil {
			t.Fatalf("receipt %d: %v", seq, err)
		}
	}
	err = v.Verify(pub, msgs[1].Data, msgs[0].Header.Get(receipts.SignatureHeader), msgs[0].Header.Get(receipts.ProofHeader))
	if !errors.Is(err, receipts.ErrBadSignature) {
		t.Fatalf("receipt under another's proof: got %v, want ErrBadSignature", err)
	}
}
