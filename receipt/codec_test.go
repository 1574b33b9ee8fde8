package receipt

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const validJSON = `{"v":1,"receipt_id":"01890a5d-ac96-774b-bcce-b302099a8057","event_id":"evt-1","origin_stream":"L1A","processor":"edge-1","site":"edge-1","status":"processed","processed_at":"2026-01-02T03:04:05.000000006Z"}`

// replaceIn replaces the first old in s with new; used to build
// single-defect variants of validJSON.
func replaceIn(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic("test bug: " + old + " not in input")
	}
	return strings.Replace(s, old, new, 1)
}

func TestDecode_Valid(t *testing.T) {
	r, err := Decode([]byte(validJSON))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := Receipt{
		Version: 1, ReceiptID: "01890a5d-ac96-774b-bcce-b302099a8057", EventID: "evt-1",
		OriginStream: "L1A", Processor: "edge-1", Site: "edge-1", Status: StatusProcessed,
		ProcessedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
	b, err := r.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if string(b) != validJSON {
		t.Fatalf("re-encoding differs:\n got %s\nwant %s", b, validJSON)
	}
}

func TestDecode_Accepts(t *testing.T) {
	tests := []struct{ name, in string }{
		{"whitespace", " \n" + replaceIn(validJSON, `,"site"`, ` , "site"`) + "\n\t"},
		{"reordered keys", `{"status":"processed","v":1,"site":"s","processor":"p","origin_stream":"o","event_id":"e","receipt_id":"01890a5d-ac96-774b-bcce-b302099a8057","processed_at":"2026-01-02T03:04:05Z"}`},
		{"with reason", replaceIn(validJSON, `"status":"processed"`, `"status":"dead_lettered","reason":"sink rejected: schema"`)},
		{"time offset", replaceIn(validJSON, `2026-01-02T03:04:05.000000006Z`, `2026-01-02T04:04:05+01:00`)},
		{"event id with specials", replaceIn(validJSON, `"evt-1"`, `"a.b *>\u00e9 \ud83d\ude00 \"q\""`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if r.ProcessedAt.Location() != time.UTC {
				t.Errorf("ProcessedAt not UTC: %v", r.ProcessedAt.Location())
			}
		})
	}
}

func TestDecode_Rejects(t *testing.T) {
	tests := []struct {
		name, in, wantMsg string
	}{
		{"empty", ``, "invalid JSON"},
		{"not json", `hello`, "invalid JSON"},
		{"array", `[1]`, "not a JSON object"},
		{"string", `"x"`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"truncated", validJSON[:len(validJSON)-1], "invalid JSON"},
		{"trailing object", validJSON + `{}`, "trailing data"},
		{"trailing garbage", validJSON + `x`, "trailing data"},
		{"trailing comma", replaceIn(validJSON, `Z"}`, `Z",}`), "invalid JSON"},
		{"unknown field", replaceIn(validJSON, `{"v":1`, `{"v":1,"extra":1`), `unknown field "extra"`},
		{"case-different field", replaceIn(validJSON, `"site"`, `"Site"`), `unknown field "Site"`},
		{"duplicate field", replaceIn(validJSON, `{"v":1`, `{"v":1,"event_id":"x"`), `duplicate field "event_id"`},
		{"duplicate v", replaceIn(validJSON, `{"v":1`, `{"v":1,"v":1`), `duplicate field "v"`},
		{"v string", replaceIn(validJSON, `"v":1`, `"v":"1"`), "want an integer, got a string"},
		{"v float", replaceIn(validJSON, `"v":1`, `"v":1.0`), "not an integer"},
		{"v exponent", replaceIn(validJSON, `"v":1`, `"v":1e0`), "not an integer"},
		{"v huge", replaceIn(validJSON, `"v":1`, `"v":99999999999999999999`), "not an integer"},
		{"v 2", replaceIn(validJSON, `"v":1`, `"v":2`), "unsupported version"},
		{"v null", replaceIn(validJSON, `"v":1`, `"v":null`), "got null"},
		{"event_id number", replaceIn(validJSON, `"evt-1"`, `7`), "want a string, got a number"},
		{"event_id object", replaceIn(validJSON, `"evt-1"`, `{}`), "got an object"},
		{"event_id array", replaceIn(validJSON, `"evt-1"`, `["a"]`), "got an array"},
		{"event_id bool", replaceIn(validJSON, `"evt-1"`, `true`), "got a boolean"},
		{"event_id null", replaceIn(validJSON, `"evt-1"`, `null`), "got null"},
		{"event_id empty", replaceIn(validJSON, `"evt-1"`, `""`), "event_id: empty"},
		{"event_id NUL", replaceIn(validJSON, `"evt-1"`, `"a\u0000b"`), "contains NUL"},
		{"event_id too long", replaceIn(validJSON, `"evt-1"`, `"`+strings.Repeat("x", MaxEventIDLen+1)+`"`), "limit 512"},
		{"invalid utf8", replaceIn(validJSON, `"evt-1"`, "\"a\xffb\""), "not valid UTF-8"},
		{"missing event_id", replaceIn(validJSON, `"event_id":"evt-1",`, ``), "missing required field(s): event_id"},
		{"missing several", `{"v":1}`, "missing required field(s): receipt_id, event_id, origin_stream, processor, site, status, processed_at"},
		{"bad status", replaceIn(validJSON, `"processed"`, `"done"`), "status: must be"},
		{"bad processor", replaceIn(validJSON, `"processor":"edge-1"`, `"processor":"edge 1"`), "processor: only"},
		{"processor too long", replaceIn(validJSON, `"processor":"edge-1"`, `"processor":"`+strings.Repeat("p", MaxNameLen+1)+`"`), "processor: 65 bytes"},
		{"empty site", replaceIn(validJSON, `"site":"edge-1"`, `"site":""`), "site: empty"},
		{"dotted origin", replaceIn(validJSON, `"L1A"`, `"L1.A"`), "origin_stream: only"},
		{"bad uuid", replaceIn(validJSON, `01890a5d-ac96-774b-bcce-b302099a8057`, `not-a-uuid`), "receipt_id"},
		{"uppercase uuid", replaceIn(validJSON, `01890a5d-ac96-774b-bcce-b302099a8057`, `01890A5D-AC96-774B-BCCE-B302099A8057`), "receipt_id"},
		{"nil uuid", replaceIn(validJSON, `01890a5d-ac96-774b-bcce-b302099a8057`, `00000000-0000-0000-0000-000000000000`), "receipt_id"},
		{"bad time", replaceIn(validJSON, `2026-01-02T03:04:05.000000006Z`, `yesterday`), "not an RFC 3339 timestamp"},
		{"time without zone", replaceIn(validJSON, `2026-01-02T03:04:05.000000006Z`, `2026-01-02T03:04:05`), "not an RFC 3339 timestamp"},
		{"zero time", replaceIn(validJSON, `2026-01-02T03:04:05.000000006Z`, `0001-01-01T00:00:00Z`), "processed_at: must be set"},
		{"reason too long", replaceIn(validJSON, `"status"`, `"reason":"`+strings.Repeat("r", MaxReasonLen+1)+`","status"`), "reason: 1025 bytes"},
		{"too large", validJSON + strings.Repeat(" ", MaxEncodedSize), "limit 16384"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.in))
			if err == nil {
				t.Fatal("Decode succeeded, want error")
			}
			if !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrQuarantine) {
				t.Errorf("error %v does not match ErrMalformed and ErrQuarantine", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestEncode_Invalid(t *testing.T) {
	r := testReceipt("evt-1")
	r.Status = "nope"
	r.Site = ""
	_, err := r.Encode()
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrQuarantine) {
		t.Fatalf("Encode error %v, want ErrInvalid", err)
	}
	for _, want := range []string{"status", "site"} { // all problems at once
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// TestEncode_WorstCaseFits checks that every valid receipt encodes within
// MaxEncodedSize, even when its strings need maximal JSON escaping.
func TestEncode_WorstCaseFits(t *testing.T) {
	r := testReceipt(strings.Repeat("\x01", MaxEventIDLen))
	r.Status = StatusDeadLettered
	r.Reason = strings.Repeat("\x02", MaxReasonLen)
	r.OriginStream = strings.Repeat("o", MaxNameLen)
	r.Processor = strings.Repeat("p", MaxNameLen)
	r.Site = strings.Repeat("s", MaxNameLen)
	b := mustEncode(t, r)
	if len(b) > MaxEncodedSize {
		t.Fatalf("worst case is %d bytes > %d", len(b), MaxEncodedSize)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got != r {
		t.Fatal("round trip differs")
	}
}

func TestEncode_NoHTMLEscaping(t *testing.T) {
	b := mustEncode(t, testReceipt("<a&b>"))
	if !strings.Contains(string(b), `"event_id":"<a&b>"`) {
		t.Fatalf("unexpected encoding %s", b)
	}
}
