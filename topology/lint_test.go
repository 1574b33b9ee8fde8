package topology

import (
	"strings"
	"testing"
	"time"
)

// TestLint_AddressSpace: on a 32-bit platform an edge whose outbox file
// could outgrow OutboxLimit32 is warned about, with the assumption the
// estimate rests on; a 64-bit platform, and a hub, are not.
func TestLint_AddressSpace(t *testing.T) {
	type want struct{ path, msg string }
	for _, tt := range []struct {
		name      string
		site      string
		addr32    bool
		sink      string
		retention time.Duration // zero: the default, 168h
		want      []want
	}{
		{name: "edge defaults, 32-bit", site: "edge1", addr32: true, want: []want{
			{"sink.type", `"store" keeps every event in the outbox file`},
			{"outbox.retention", "168h0m0s keeps every published receipt that long: at 10 events/s and about 1536 bytes"},
		}},
		{name: "edge defaults, 64-bit", site: "edge1"},
		{name: "file sink, 12h, 32-bit", site: "edge1", addr32: true, sink: "file", retention: 12 * time.Hour},
		{name: "file sink, 19h, 32-bit", site: "edge1", addr32: true, sink: "file", retention: 19 * time.Hour},
		{name: "file sink, 24h, 32-bit", site: "edge1", addr32: true, sink: "file", retention: 24 * time.Hour, want: []want{
			{"outbox.retention", "lower it to 19h0m0s or less"},
		}},
		{name: "hub defaults, 32-bit", site: "hub", addr32: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := secureConfig(t, tt.site)
			c.Topology = secureTopology(t)
			c.Topology.Events.DuplicateWindow = Duration(time.Hour)
			c.Sink.Type = tt.sink
			c.Outbox.Retention = Duration(tt.retention)
			c.SetDefaults()
			c.Delivery.InProgress.Enabled = true
			c.Topology.SetDefaults()
			var got []Warning
			for _, w := range lint(c, tt.addr32) {
				if w.Path == "sink.type" || w.Path == "outbox.retention" {
					got = append(got, w)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %v, want %d: %v", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if got[i].Path != w.path || !strings.Contains(got[i].Msg, w.msg) || !strings.Contains(got[i].Msg, "32-bit") {
					t.Errorf("warning %d: %s\nwant %s: …%s…", i, got[i], w.path, w.msg)
				}
			}
		})
	}
}
