package status

import (
	"errors"
	"testing"

	"github.com/leafline/leafline/completion/record"
)

// FuzzDecodeListRequest: the micro list body parser never panics and only
// returns valid queries.
func FuzzDecodeListRequest(f *testing.F) {
	for _, s := range []string{`{"status":"pending"}`, `{"status":"overdue","site":"e","limit":3,"after":""}`, `{}`, `null`, `{"status":"pending"} `, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeListRequest(b)
		if err != nil {
			if !errors.Is(err, record.ErrBadQuery) {
				t.Fatalf("error %v does not wrap ErrBadQuery", err)
			}
			return
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("accepted invalid query: %v", err)
		}
	})
}
