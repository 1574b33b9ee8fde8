package jsmsg

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// A copy keeps an event's own headers and drops those of the publish
// that stored it and those the server acts on.
func TestReplayed(t *testing.T) {
	h := nats.Header{}
	for _, k := range []string{"Nats-Msg-Id", "Leafline-Expires", "Nats-Batch-Id", "Nats-Batch-Commit", "Nats-Expected-Last-Sequence",
		"Nats-Stream-Source", "Nats-Rollup", "Nats-TTL", "Nats-Marker-Reason", "Nats-Schedule-Next"} {
		h.Set(k, "v")
	}
	got := Replayed(h)
	if len(got) != 2 || got.Get("Nats-Msg-Id") != "v" || got.Get("Leafline-Expires") != "v" {
		t.Fatalf("replayed headers: %v", got)
	}
}
