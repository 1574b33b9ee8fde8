package receipt

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func batchSigner(t *testing.T) (*Signer, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(kp)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return s, pub
}

func batchData(t *testing.T, n int) [][]byte {
	data := make([][]byte, n)
	for i := range data {
		data[i] = signingReceipt(t, fmt.Sprintf("b-%d", i))
	}
	return data
}

// Every receipt of a batch verifies with its group's signature and its own
// proof, whatever the batch size (odd sizes leave nodes without partner).
// A group covers up to proofGroup receipts; a group of one is signed as
// Sign signs.
func TestSignBatch_EveryReceiptVerifies(t *testing.T) {
	s, pub := batchSigner(t)
	for _, n := range []int{1, 2, 3, 5, 8, 13, 16, 17, 33, 256, 1000} {
		data := batchData(t, n)
		sigs, proofs := s.SignBatch(data)
		if len(sigs) != n || len(proofs) != n {
			t.Fatalf("n=%d: %d signatures, %d proofs", n, len(sigs), len(proofs))
		}
		v := NewVerifier()
		for i := range data {
			first := i - i%proofGroup
			single := first == n-1
			if single != (proofs[i] == "") || single && sigs[i] != s.Sign(data[i]) {
				t.Fatalf("n=%d receipt %d: proof %q; signed alone: %v", n, i, proofs[i], single)
			}
			if sigs[i] != sigs[first] || i%proofGroup == 0 && i > 0 && sigs[i] == sigs[i-1] {
				t.Fatalf("n=%d receipt %d: not its group's signature", n, i)
			}
			if err := v.Verify(pub, data[i], sigs[i], proofs[i]); err != nil {
				t.Fatalf("n=%d receipt %d: %v", n, i, err)
			}
			// A fresh verifier (no remembered root) agrees.
			if err := NewVerifier().Verify(pub, data[i], sigs[i], proofs[i]); err != nil {
				t.Fatalf("n=%d receipt %d, fresh verifier: %v", n, i, err)
			}
		}
	}
}

// A receipt altered, moved to another receipt's proof, or checked against
// another key fails — also after its batch's root was verified and
// remembered. Malformed proofs fail with a reason.
func TestSignBatch_TamperingRefused(t *testing.T) {
	s, pub := batchSigner(t)
	_, otherPub := batchSigner(t)
	data := batchData(t, 7)
	sigs, proofs := s.SignBatch(data)
	sig := sigs[0]
	v := NewVerifier()
	if err := v.Verify(pub, data[0], sig, proofs[0]); err != nil {
		t.Fatal(err)
	}
	altered := []byte(strings.Replace(string(data[3]), `"processed"`, `"dead_lettered"`, 1))
	forged := signingReceipt(t, "not-in-batch")
	others, _ := s.SignBatch(batchData(t, 7)[:6])
	other := others[0]
	for _, tc := range []struct {
		name            string
		pub, sig, proof string
		data            []byte
		want            string
	}{
		{"altered", pub, sig, proofs[3], altered, "does not verify"},
		{"foreign receipt", pub, sig, proofs[3], forged, "does not verify"},
		{"other index", pub, sig, proofs[4], data[3], "does not verify"},
		{"other key", otherPub, sig, proofs[3], data[3], "does not verify"},
		{"other batch's signature", pub, other, proofs[3], data[3], "does not verify"},
		{"no proof", pub, sig, "", data[3], "does not verify"},
		{"count changed", pub, sig, strings.Replace(proofs[3], ".7.", ".8.", 1), data[3], "does not verify"},
		{"index out of range", pub, sig, "7.7." + strings.SplitN(proofs[3], ".", 3)[2], data[3], "out of range"},
		{"two parts", pub, sig, "3.7", data[3], "not index.count.siblings"},
		{"bad siblings", pub, sig, "3.7.!!", data[3], "not base64url"},
		{"short", pub, sig, "3.7.", data[3], "too short"},
		{"long", pub, sig, proofs[3] + strings.SplitN(proofs[3], ".", 3)[2][:43], data[3], "too long"},
		{"unsigned", pub, "", proofs[3], data[3], "unsigned"},
		{"garbage signature", pub, "!!!", proofs[3], data[3], "not a base64url"},
	} {
		err := v.Verify(tc.pub, tc.data, tc.sig, tc.proof)
		if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrBadSignature (%q)", tc.name, err, tc.want)
		}
	}
}
