package runner

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/leafline/leafline/sink"
)

func validDLQRecord() DLQRecord {
	return DLQRecord{
		Version: DLQVersion, Site: "edge1", Subject: "events.x", Stream: "L2A", Consumer: "leafline-sink",
		StreamSeq: 7, ConsumerSeq: 9, EventIDError: "no usable event_id", Delivered: 1,
		ErrorType: "no_event_id", DeadLetteredAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
}

func TestDLQRecord_RoundTrip(t *testing.T) {
	r := validDLQRecord()
	r.Headers = map[string][]string{"A": {"b"}}
	r.Payload = []byte{0, 1, 2, 255}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDLQRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
	}
}

func TestDLQRecord_Invalid(t *testing.T) {
	for name, in := range map[string]string{
		"empty":         ``,
		"not object":    `[]`,
		"unknown field": `{"v":1,"site":"e","subject":"s","stream":"L2A","stream_seq":1,"event_id":"x","error_type":"t","dead_lettered_at":"2026-01-01T00:00:00Z","extra":1}`,
		"trailing":      `{"v":1,"site":"e","subject":"s","stream":"L2A","stream_seq":1,"event_id":"x","error_type":"t","dead_lettered_at":"2026-01-01T00:00:00Z"} {}`,
		"version":       `{"v":2,"site":"e","subject":"s","stream":"L2A","stream_seq":1,"event_id":"x","error_type":"t","dead_lettered_at":"2026-01-01T00:00:00Z"}`,
		"no seq":        `{"v":1,"site":"e","subject":"s","stream":"L2A","event_id":"x","error_type":"t","dead_lettered_at":"2026-01-01T00:00:00Z"}`,
		"no id or why":  `{"v":1,"site":"e","subject":"s","stream":"L2A","stream_seq":1,"error_type":"t","dead_lettered_at":"2026-01-01T00:00:00Z"}`,
		"no time":       `{"v":1,"site":"e","subject":"s","stream":"L2A","stream_seq":1,"event_id":"x","error_type":"t"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeDLQRecord([]byte(in)); !errors.Is(err, ErrBadDLQRecord) {
				t.Fatalf("got %v, want ErrBadDLQRecord", err)
			}
		})
	}
}

func FuzzDecodeDLQRecord(f *testing.F) {
	b, _ := validDLQRecord().Encode()
	f.Add(b)
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeDLQRecord(data)
		if err != nil {
			if !errors.Is(err, ErrBadDLQRecord) {
				t.Fatalf("error does not wrap ErrBadDLQRecord: %v", err)
			}
			return
		}
		enc, err := r.Encode()
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		again, err := DecodeDLQRecord(enc)
		if err != nil || !reflect.DeepEqual(again.DeadLetteredAt.UTC(), r.DeadLetteredAt.UTC()) || again.EventID != r.EventID {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func TestErrorType(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("exec sink: %w: in flight at 3 crashes", sink.ErrWorkerCrash), "worker_crash"},
		{sink.Permanent(errors.New("refused")), "sink_permanent"},
		{fmt.Errorf("%w: big", ErrOversize), "oversize"},
		{fmt.Errorf("%w: %w", errMaxDeliver, errors.New("retry")), "max_deliver"},
	} {
		if got := errorType(tc.err); got != tc.want {
			t.Errorf("errorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
