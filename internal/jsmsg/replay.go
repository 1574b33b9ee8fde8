package jsmsg

import (
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
)

// Replayed is a copy of a stored message's headers without those that
// must not be published again: those of the publish that stored it (an
// atomic batch's, whose commit header would end another batch, and its
// expectations) and those the server sets itself or acts on at store
// time (a sourced message's origin, rollups, TTLs, markers, schedules),
// which a publish may not carry or would turn into an action on the
// stream it goes to.
func Replayed(h nats.Header) nats.Header {
	out := make(nats.Header, len(h))
	for k, v := range h {
		if replayable(k) {
			out[k] = slices.Clone(v)
		}
	}
	return out
}

func replayable(k string) bool {
	switch k {
	case "Nats-Stream-Source", "Nats-Rollup", "Nats-TTL", "Nats-Marker-Reason":
		return false
	}
	return !strings.HasPrefix(k, "Nats-Batch-") && !strings.HasPrefix(k, "Nats-Expected-") &&
		!strings.HasPrefix(k, "Nats-Schedule")
}

// HeaderBytes is the size of h as sent on the wire: the "NATS/1.0" line,
// each "Key: value" line and the blank line that ends them (0 without
// headers).
func HeaderBytes(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// Unbatch takes from m what an atomic batch publish put on it (its
// Nats-Batch- headers, and the reply of its first message), so that m can
// be published on its own after the batch was refused: with them, the
// server would take it for a message of a batch.
func Unbatch(m *nats.Msg) {
	m.Reply = ""
	for k := range m.Header {
		if strings.HasPrefix(k, "Nats-Batch-") {
			delete(m.Header, k)
		}
	}
}
