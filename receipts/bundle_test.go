package receipts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/internal/check"
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

// publishBundle publishes recs as one bundle on subject.
func publishBundle(t *testing.T, js jetstream.JetStream, subject, id string, recs ...[]byte) {
	t.Helper()
	body := bytes.Join(recs, []byte{'\n'})
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(BundleHeader, strconv.Itoa(len(recs)))
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := js.PublishMsg(testCtx(t), m); err != nil {
		t.Fatalf("publish bundle: %v", err)
	}
}

// TestService_Bundles: the receipts of a bundle are applied as single
// receipts are, each counted; a receipt of it that cannot be read is
// quarantined alone (its place in the bundle recorded) and the rest are
// applied; a bundle that does not speak for one site, the site of its
// subject, is quarantined whole; a bundle delivered again counts its
// receipts as duplicates. Every message is ACKed once.
func TestService_Bundles(t *testing.T) {
	for _, applyBatch := range []int{1, 128} {
		t.Run(fmt.Sprintf("ApplyBatch=%d", applyBatch), func(t *testing.T) {
			_, js := startJS(t)
			ctx := testCtx(t)
			createR1(t, js)
			cfg := testConfig(js)
			cfg.ApplyBatch = applyBatch
			cfg.SubjectPrefix = "leafline.receipts"
			svc, err := NewService(cfg)
			if err != nil {
				t.Fatal(err)
			}
			startService(t, svc)
			const site = "leafline.receipts.edge-1.bundle"
			var ten [][]byte
			for i := range 10 {
				ten = append(ten, mustEncode(t, testReceipt(eventID(i))))
			}
			publishBundle(t, js, site, "b-ten", ten...)
			publishBundle(t, js, site, "b-bad", mustEncode(t, testReceipt("evt-b1")), mustEncode(t, testReceipt("evt-b2")), []byte(`{"v":1,`))
			two := testReceipt("evt-two-sites")
			two.Site, two.Processor = "edge-2", "edge-2"
			publishBundle(t, js, site, "b-sites", mustEncode(t, testReceipt("evt-s1")), mustEncode(t, two))
			publishBundle(t, js, "leafline.receipts.edge-2.bundle", "b-subject", mustEncode(t, testReceipt("evt-x1")), mustEncode(t, testReceipt("evt-x2")))
			publishBundle(t, js, site, "b-ten-again", ten...)
			want := Stats{Received: 10 + 3 + 2 + 2 + 10, Applied: 12, Duplicates: 10, Quarantined: 3}
			check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
				if err := statsEqual(svc, want); err != nil {
					return err
				}
				return consumerDrained(ctx, js, "R1", DefaultConsumer)
			})
			for _, id := range []string{"evt-s1", "evt-two-sites", "evt-x1", "evt-x2"} {
				if _, err := svc.Get(ctx, id); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s: Get = %v, want ErrNotFound (its bundle was refused whole)", id, err)
				}
			}
			for _, id := range []string{eventID(0), eventID(9), "evt-b1", "evt-b2"} {
				c, err := svc.Get(ctx, id)
				if err != nil || c.Processors["edge-1"].Status != StatusProcessed || c.Processors["edge-1"].Duplicates != boolInt(id == eventID(0) || id == eventID(9)) {
					t.Errorf("%s: Get = %+v, %v", id, c, err)
				}
			}
			// Lanes apply bundles in parallel: the records come in any order.
			whole, alone := 0, 0
			for _, r := range quarantineRecords(t, js) {
				switch {
				case r.Of == 3 && r.Index == 2 && string(r.Receipt) == `{"v":1,` && strings.Contains(r.Reason, "malformed"):
					alone++
				case r.Of == 0 && r.Index == 0 && r.Size == len(r.Receipt) && r.Size > 0:
					whole++
				default:
					t.Errorf("quarantine record %+v", r)
				}
			}
			if alone != 1 || whole != 2 {
				t.Errorf("quarantined %d receipts alone and %d bundles whole, want 1 and 2", alone, whole)
			}
			if got := svc.Refusals()[RefusedSubjectMismatch]; got != 2 {
				t.Errorf("subject_mismatch refusals %d, want 2", got)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// quarantineRecords returns the quarantine records in stream order.
func quarantineRecords(t *testing.T, js jetstream.JetStream) []QuarantineRecord {
	t.Helper()
	ctx := testCtx(t)
	s, err := js.Stream(ctx, DefaultQuarantineStream)
	if err != nil {
		t.Fatal(err)
	}
	var out []QuarantineRecord
	st := s.CachedInfo().State
	for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var rec QuarantineRecord
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}
