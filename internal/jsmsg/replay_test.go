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

// A message of a refused batch goes on its own without the batch's marks.
func TestUnbatch(t *testing.T) {
	m := nats.NewMsg("s")
	m.Reply = "_INBOX.x"
	for _, k := range []string{"Nats-Msg-Id", "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit"} {
		m.Header.Set(k, "v")
	}
	Unbatch(m)
	if m.Reply != "" || len(m.Header) != 1 || m.Header.Get("Nats-Msg-Id") != "v" {
		t.Fatalf("after Unbatch: reply %q, headers %v", m.Reply, m.Header)
	}
}
