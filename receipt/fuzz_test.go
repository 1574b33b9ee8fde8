package receipt

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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

// FuzzDecode_PlainMatchesTokens: where the one-pass path decodes an input,
// the general path decodes it to the same receipt (and both validate); so
// the fast path accepts nothing the strict decoder would refuse.
func FuzzDecode_PlainMatchesTokens(f *testing.F) {
	for _, r := range []Receipt{testReceipt("evt-1"), New("a.b *> 😀", "L1A", "edge_2", "site-9", StatusDeadLettered, time.Date(2026, 5, 6, 7, 8, 9, 123, time.UTC))} {
		b, err := r.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		validJSON, " \n" + validJSON + "\t ", `{}`, `{"v":1}`, `{"v":1,"v":1}`, validJSON + `{}`,
		strings.Replace(validJSON, `"v":1`, `"v":01`, 1), strings.Replace(validJSON, `"v":1`, `"v":1e0`, 1),
		strings.Replace(validJSON, `"v":1`, `"v":-1`, 1), strings.Replace(validJSON, `"v":1`, `"v":"1"`, 1),
		strings.Replace(validJSON, `"evt-1"`, `null`, 1), strings.Replace(validJSON, `"evt-1"`, `"e\tv"`, 1),
		strings.Replace(validJSON, `,"site"`, `,"site":"x","site"`, 1), strings.Replace(validJSON, `}`, `,}`, 1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) {
			return // Decode refuses it before either path
		}
		plain, ok := decodePlain(b)
		if !ok {
			return
		}
		full, err := decodeTokens(b)
		if err != nil {
			if plain.Validate() == nil {
				t.Fatalf("the one-pass path decodes %q to a valid receipt; the general path refuses it: %v", b, err)
			}
			return
		}
		if plain != full {
			t.Fatalf("paths differ on %q:\n%+v\n%+v", b, plain, full)
		}
	})
}

// FuzzDeadline: any header values give a deadline or an error wrapping
// ErrBadExpiry, never a panic.
func FuzzDeadline(f *testing.F) {
	f.Add("", "", "", int64(0))
	f.Add("2026-01-02T03:04:05Z", "", "", int64(time.Hour))
	f.Add("", "90s", "2026-01-02T03:04:05.123Z", int64(0))
	f.Add("x", "-1s", "y", int64(1))
	f.Fuzz(func(t *testing.T, expiresAt, expireAfter, publishedAt string, rule int64) {
		h := map[string]string{ExpiresAtHeader: expiresAt, ExpireAfterHeader: expireAfter, PublishedAtHeader: publishedAt}
		_, _, err := Deadline(func(k string) string { return h[k] }, time.Duration(rule), time.Unix(0, 0))
		if err != nil && !errors.Is(err, ErrBadExpiry) {
			t.Fatalf("error %v does not wrap ErrBadExpiry", err)
		}
	})
}
