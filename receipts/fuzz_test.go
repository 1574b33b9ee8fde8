package receipts

import (
	"errors"
	"net/url"
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

// FuzzDecodeCursor: decodeCursor never panics, accepts only what
// encodeCursor makes for the same query, and round-trips.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor(ListPending, "", 1), "pending", "")
	f.Add(encodeCursor(ListOverdue, "edge-1", 1<<40), "overdue", "edge-1")
	f.Add("MXxwZW5kaW5nfHwx", "pending", "")
	f.Add("", "conflict", "x")
	f.Add("MXxwZW5kaW5nfHww", "pending", "") // seq 0
	f.Fuzz(func(t *testing.T, c, status, site string) {
		seq, err := decodeCursor(c, ListStatus(status), site)
		if err != nil {
			return
		}
		if seq == 0 || encodeCursor(ListStatus(status), site, seq) != c {
			t.Fatalf("accepted %q as seq %d, which encodes differently", c, seq)
		}
	})
}

// FuzzParseListQuery: any query string either fails with ErrBadQuery or
// yields a valid query that survives Encode and a second parse.
func FuzzParseListQuery(f *testing.F) {
	for _, s := range []string{
		"status=pending", "status=overdue&site=edge-1&limit=5", "status=conflict&after=" + encodeCursor(ListConflict, "", 3),
		"status=pending&status=pending", "limit=1", "status=pending&limit=007", "status=%zz", "status=pending&x=",
		"status=dead_lettered&site=a.b", "status=pending&limit=-0", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := ParseListQuery(v)
		if err != nil {
			if !errors.Is(err, ErrBadQuery) {
				t.Fatalf("error %v does not wrap ErrBadQuery", err)
			}
			return
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("parsed query invalid: %v", err)
		}
		v2, err := url.ParseQuery(q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		q2, err := ParseListQuery(v2)
		if err != nil || q2 != q {
			t.Fatalf("round trip: %+v → %q → %+v, %v", q, q.Encode(), q2, err)
		}
	})
}

// FuzzDecodeListRequest: the micro list body parser never panics and only
// returns valid queries.
func FuzzDecodeListRequest(f *testing.F) {
	for _, s := range []string{`{"status":"pending"}`, `{"status":"overdue","site":"e","limit":3,"after":""}`, `{}`, `null`, `{"status":"pending"} `, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeListRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadQuery) {
				t.Fatalf("error %v does not wrap ErrBadQuery", err)
			}
			return
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("accepted invalid query: %v", err)
		}
	})
}

// FuzzParseIndexKey: index keys round-trip for every valid event_id, and
// the parser never panics on junk.
func FuzzParseIndexKey(f *testing.F) {
	f.Add("p.=."+idToken("evt-1"), "evt-1")
	f.Add("p.edge-1."+idToken("a.*.>"), "a.*.>")
	f.Add("x.a.b", "")
	f.Add("d..", "")
	f.Add("pe."+idToken("old-format"), "")
	f.Add("c.e.A0", "") // non-canonical base64 of "\x03"
	f.Fuzz(func(t *testing.T, key, id string) {
		if k, got, err := parseIndexKey(key); err == nil {
			if k.key(idToken(got)) != key {
				t.Fatalf("%q parsed as %v %q, which is not canonical", key, k, got)
			}
		}
		if validateEventID(id) != nil {
			return
		}
		for _, k := range []idxKey{eventKey(kindPending), siteKey(kindConflict, "edge-1")} {
			k2, got, err := parseIndexKey(k.key(idToken(id)))
			if err != nil || k2 != k || got != id {
				t.Fatalf("round trip of %q: %v %q %v", id, k2, got, err)
			}
		}
	})
}
