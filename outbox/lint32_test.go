package outbox

import (
	"strings"
	"testing"
	"time"
)

// TestAddressSpaceWarnings: an edge whose outbox file could outgrow
// MaxSize32 is warned about, with the assumption the estimate rests on.
func TestAddressSpaceWarnings(t *testing.T) {
	type want struct{ setting, msg string }
	for _, tt := range []struct {
		name      string
		sink      string
		retention time.Duration
		want      []want
	}{
		{name: "the defaults", sink: "store", retention: 168 * time.Hour, want: []want{
			{"sink.type", `"store" keeps every event in the outbox file`},
			{"outbox.retention", "168h0m0s keeps every published receipt that long: at 10 events/s and about 1536 bytes"},
		}},
		{name: "file sink, 12h", sink: "file", retention: 12 * time.Hour},
		{name: "file sink, 19h", sink: "file", retention: 19 * time.Hour},
		{name: "file sink, 24h", sink: "file", retention: 24 * time.Hour, want: []want{
			{"outbox.retention", "lower it to 19h0m0s or less"},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := AddressSpaceWarnings(tt.sink, tt.retention)
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %v, want %d: %v", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if got[i].Setting != w.setting || !strings.Contains(got[i].Msg, w.msg) || !strings.Contains(got[i].Msg, "32-bit") {
					t.Errorf("warning %d: %+v\nwant %s: …%s…", i, got[i], w.setting, w.msg)
				}
			}
		})
	}
}
