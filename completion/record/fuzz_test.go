package record

import (
	"errors"
	"net/url"
	"testing"
)

// FuzzDecodeCursor: decodeCursor never panics, accepts only what
// encodeCursor makes for the same query, and round-trips.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(EncodeCursorSeq(ListPending, "", 1), "pending", "")
	f.Add(EncodeCursorSeq(ListOverdue, "edge-1", 1<<40), "overdue", "edge-1")
	f.Add("MXxwZW5kaW5nfHwx", "pending", "")
	f.Add("", "conflict", "x")
	f.Add("MXxwZW5kaW5nfHww", "pending", "") // seq 0
	f.Fuzz(func(t *testing.T, c, status, site string) {
		seq, err := DecodeCursorSeq(c, ListStatus(status), site)
		if err != nil {
			return
		}
		if seq == 0 || EncodeCursorSeq(ListStatus(status), site, seq) != c {
			t.Fatalf("accepted %q as seq %d, which encodes differently", c, seq)
		}
	})
}

// FuzzParseListQuery: any query string either fails with ErrBadQuery or
// yields a valid query that survives Encode and a second parse.
func FuzzParseListQuery(f *testing.F) {
	for _, s := range []string{
		"status=pending", "status=overdue&site=edge-1&limit=5", "status=conflict&after=" + EncodeCursorSeq(ListConflict, "", 3),
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
