// Package check folds what the chaos driver published and what L1 recorded
// into a verdict: events lost, receipts applied twice, completion records
// that nobody published (phantoms), records that went back, and expired
// events that were also processed.
package check

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Publish outcomes, one per event in the driver's history.
const (
	None      byte = iota
	Published      // sent, outcome not known yet
	Acked          // PubAck'ed by the origin stream at L1
	Unknown        // timed out or failed: it may or may not be stored
)

// EventID is the event_id of the driver's event n.
func EventID(n int) string { return "ev-" + strconv.Itoa(n) }

// EventNum parses an event_id written by the driver; ok is false for any
// other id.
func EventNum(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, "ev-")
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

// ReadStream reads every message of stream with an ordered consumer (headers
// only if asked) and returns the stream's last sequence when it started.
func ReadStream(ctx context.Context, js jetstream.JetStream, stream string, headersOnly bool, fn func(jetstream.Msg, uint64) error) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	last := info.State.LastSeq
	oc, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{HeadersOnly: headersOnly})
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	for {
		batch, err := oc.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return 0, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return 0, err
			}
			if meta.Sequence.Stream > last {
				return last, nil
			}
			if err := fn(m, meta.Sequence.Stream); err != nil {
				return 0, err
			}
			if meta.Sequence.Stream == last || meta.NumPending == 0 {
				return last, nil
			}
		}
		if err := batch.Error(); err != nil {
			return 0, err
		}
		if n == 0 {
			return last, nil
		}
	}
}
