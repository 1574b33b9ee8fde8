package receipts

import (
	"strings"
	"testing"
	"time"
)

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to
// bytes that decode to the same receipt.
func FuzzDecode(f *testing.F) {
	valid := testReceipt("evt-1")
	dead := New("a.b *> 😀", "L1A", "edge_2", "site-9", StatusDeadLettered, time.Date(2026, 5, 6, 7, 8, 9, 123, time.FixedZone("", -7200)))
	dead.Reason = "sink: <rejected> & \"quoted\"\n"
	for _, r := range []Receipt{valid, dead} {
		b, err := r.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(validJSON))
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"v":1}`, `{"v":1,"v":1}`, validJSON + `{}`, validJSON + ` `,
		strings.Replace(validJSON, `"v":1`, `"v":1.0`, 1),
		strings.Replace(validJSON, `"evt-1"`, `"\u0000"`, 1),
		strings.Replace(validJSON, `"evt-1"`, `"\ud800"`, 1),
		strings.Replace(validJSON, `"site"`, `"extra":{"a":[1,2]},"site"`, 1),
		"\xff" + validJSON,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		enc, err := r.Encode()
		if err != nil {
			t.Fatalf("decoded receipt does not encode: %v", err)
		}
		r2, err := Decode(enc)
		if err != nil {
			t.Fatalf("re-encoded receipt does not decode: %v\n%s", err, enc)
		}
		if r2 != r {
			t.Fatalf("round trip differs:\n%+v\n%+v", r, r2)
		}
	})
}
