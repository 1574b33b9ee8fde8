package failpoint

import (
	"maps"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]float64
		wantErr string
	}{
		{"", map[string]float64{}, ""},
		{"l1.after_kv_write=kill@0.02", map[string]float64{L1AfterKVWrite: 0.02}, ""},
		{" edge.after_mark=kill@1 , edge.ack_early=on ,", map[string]float64{EdgeAfterMark: 1, EdgeAckEarly: -1}, ""},
		{"l1.after_kv_writes=kill@1", nil, "known NAME"},
		{"edge.after_mark", nil, "known NAME"},
		{"edge.after_mark=kill@0", nil, "(0, 1]"},
		{"edge.after_mark=kill@1.5", nil, "(0, 1]"},
		{"edge.after_mark=kill@x", nil, "(0, 1]"},
		{"edge.after_mark=off", nil, "kill@P or on"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Fatalf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}
