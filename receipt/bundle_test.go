package receipt

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func TestBundle_EncodeSplit(t *testing.T) {
	a, b := mustEncode(t, testReceipt("a")), mustEncode(t, testReceipt("b"))
	body, err := EncodeBundle([][]byte{a, b})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := SplitBundle(body, "2")
	if err != nil || len(parts) != 2 || !bytes.Equal(parts[0], a) || !bytes.Equal(parts[1], b) {
		t.Fatalf("SplitBundle = %q, %v", parts, err)
	}
	for _, tc := range []struct {
		name  string
		recs  [][]byte
		inErr string
	}{
		{"empty", nil, "must be 1.."},
		{"newline", [][]byte{a, []byte("{\n}")}, "newline"},
		{"too many", make([][]byte, MaxBundleReceipts+1), "must be 1.."},
		{"too large", [][]byte{bytes.Repeat([]byte("x"), MaxBundleBytes), a}, "more than"},
	} {
		if _, err := EncodeBundle(tc.recs); err == nil || !strings.Contains(err.Error(), tc.inErr) {
			t.Errorf("%s: EncodeBundle = %v, want an error with %q", tc.name, err, tc.inErr)
		}
	}
	for _, tc := range []struct {
		name, body, count string
	}{
		{"count not a number", "x", "two"},
		{"count zero", "x", "0"},
		{"count above the bound", "x", strconv.Itoa(MaxBundleReceipts + 1)},
		{"fewer receipts than the count", "x", "2"},
		{"more receipts than the count", "x\ny", "1"},
		{"an empty receipt", "x\n\ny", "3"},
	} {
		if _, err := SplitBundle([]byte(tc.body), tc.count); !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrQuarantine) {
			t.Errorf("%s: SplitBundle = %v, want ErrMalformed (quarantine)", tc.name, err)
		}
	}
}

// The same receipts in the same order give the same bundle id; another
// grouping gives another.
func TestBundle_MsgID(t *testing.T) {
	if BundleMsgID([]string{"a", "b"}) != BundleMsgID([]string{"a", "b"}) {
		t.Fatal("same receipts, another id")
	}
	for _, other := range [][]string{{"b", "a"}, {"a"}, {"a", "b", "c"}, {"ab"}} {
		if BundleMsgID(other) == BundleMsgID([]string{"a", "b"}) {
			t.Fatalf("%q has the id of [a b]", other)
		}
	}
}

// A bundle's signature covers its body and nothing else: not a receipt of
// it alone, not the body changed, not another key.
func TestBundle_Signature(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	s, err := NewSigner(kp)
	if err != nil {
		t.Fatal(err)
	}
	a := mustEncode(t, testReceipt("a"))
	body, err := EncodeBundle([][]byte{a, mustEncode(t, testReceipt("b"))})
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(BundleHeader, "2")
	h.Set(SignatureHeader, s.SignBundle(body))
	v := NewVerifier()
	if err := v.VerifyMsg(pub, body, h); err != nil {
		t.Fatal(err)
	}
	if err := v.VerifyMsg(pub, bytes.Replace(body, []byte(`"b"`), []byte(`"c"`), 1), h); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("changed body: %v", err)
	}
	if err := v.Verify(pub, a, h.Get(SignatureHeader), ""); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("one receipt under the bundle's signature: %v", err)
	}
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	if err := v.VerifyMsg(otherPub, body, h); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("another key: %v", err)
	}
	// A single receipt's signature does not pass for a bundle of it.
	one, err := EncodeBundle([][]byte{a})
	if err != nil {
		t.Fatal(err)
	}
	h1 := nats.Header{}
	h1.Set(BundleHeader, "1")
	h1.Set(SignatureHeader, s.Sign(a))
	if err := v.VerifyMsg(pub, one, h1); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a receipt's signature on its bundle: %v", err)
	}
}

func FuzzSplitBundle(f *testing.F) {
	f.Add([]byte("{}\n{}"), "2")
	f.Add([]byte("{}"), "1")
	f.Add([]byte("\n"), "2")
	f.Add([]byte(""), "-1")
	f.Fuzz(func(t *testing.T, body []byte, count string) {
		parts, err := SplitBundle(body, count)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if n, _ := strconv.Atoi(count); len(parts) != n {
			t.Fatalf("%d parts for count %s", len(parts), count)
		}
		again, err := EncodeBundle(parts)
		if err != nil || !bytes.Equal(again, body) {
			t.Fatalf("EncodeBundle(SplitBundle(body)) = %q, %v; want the body", again, err)
		}
	})
}
