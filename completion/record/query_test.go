package record

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestNewStreamFill(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		name              string
		bytes, msgs       uint64
		maxBytes, maxMsgs int64
		fill              float64
		percent           int
		limited, filling  bool
	}{
		{"no limit", 5 * mib, 100, -1, -1, 0, 0, false, false},
		{"zero limits", 5 * mib, 100, 0, 0, 0, 0, false, false},
		{"bytes", 16 * mib, 100, 64 * mib, -1, 0.25, 25, true, false},
		{"61.2 of 64 MiB", 64172851, 100, 64 * mib, 0, 64172851.0 / (64 * mib), 95, true, true},
		{"messages larger", 1 * mib, 900, 64 * mib, 1000, 0.9, 90, true, true},
		{"just under the warning", 799, 0, 1000, 0, 0.799, 79, true, false},
		{"at the warning", 800, 0, 1000, 0, 0.8, 80, true, true},
		{"over a lowered limit", 2 * mib, 0, 1 * mib, 0, 1, 100, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := NewStreamFill("L1A", tt.bytes, tt.msgs, tt.maxBytes, tt.maxMsgs)
			if f.Stream != "L1A" || f.Bytes != tt.bytes || f.Msgs != tt.msgs || f.MaxBytes != tt.maxBytes || f.MaxMsgs != tt.maxMsgs {
				t.Errorf("fields %+v", f)
			}
			if f.Fill != tt.fill || f.Percent() != tt.percent || f.Limited() != tt.limited || f.Filling() != tt.filling {
				t.Errorf("fill %v, %d%%, limited %v, filling %v; want %v, %d%%, %v, %v",
					f.Fill, f.Percent(), f.Limited(), f.Filling(), tt.fill, tt.percent, tt.limited, tt.filling)
			}
		})
	}
}

func TestStreamFill_JSON(t *testing.T) {
	b, err := json.Marshal(Summary{Streams: []StreamFill{NewStreamFill("L1A", 3, 2, 4, 10)}})
	if err != nil {
		t.Fatal(err)
	}
	const want = `"streams":[{"stream":"L1A","bytes":3,"messages":2,"max_bytes":4,"max_messages":10,"fill":0.75}]`
	if !strings.Contains(string(b), want) {
		t.Errorf("JSON %s, want it to hold %s", b, want)
	}
	b, _ = json.Marshal(Summary{})
	if strings.Contains(string(b), `"streams"`) {
		t.Errorf("JSON without streams: %s", b)
	}
}

func contains(s, sub string) bool {
	return len(sub) <= len(s) && (s[:len(sub)] == sub || contains(s[1:], sub))
}

func TestBinarySize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 64 << 20: "64 MiB", 64172851: "61.2 MiB", 1 << 30: "1 GiB", 3 << 30: "3 GiB", 5 << 40: "5 TiB", 5 << 50: "5120 TiB"} {
		if got := BinarySize(n); got != want {
			t.Errorf("BinarySize(%d) = %q, want %q", n, got, want)
		}
	}
}
