package cleanup

import (
	"context"
	"fmt"
	"time"

	"github.com/leafline/leafline/receipt"
	"github.com/nats-io/nats.go/jetstream"
)

// scanFetch is the batch one fetch of the scan asks for.
const scanFetch = 256

// scan reads up to MaxPerPass origin messages in sequence order from the
// cursor (from the stream's first message when the cursor is behind it or
// past its end), stopping at the first message younger than Grace: none
// after it can be eligible. It returns the messages and where the next
// pass starts: after the last one read, or from the beginning again once
// the young end or the end of the stream was reached.
func (c *Cleaner) scan(ctx context.Context, st jetstream.Stream, now time.Time, dryRun bool) ([]scanned, uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("receipts: cleanup: origin stream %s: %w", c.cfg.OriginStream, err)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	c.mu.Lock()
	start := c.cursor
	c.mu.Unlock()
	if dryRun || start < first || start > last {
		start = first
	}
	if info.State.Msgs == 0 {
		return nil, 0, nil
	}
	oc, err := c.cfg.JS.OrderedConsumer(ctx, c.cfg.OriginStream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   start,
		HeadersOnly:   c.cfg.OriginEventID == nil,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("receipts: cleanup: read %s: %w", c.cfg.OriginStream, err)
	}
	var out []scanned
	for len(out) < c.cfg.MaxPerPass {
		batch, err := oc.Fetch(min(scanFetch, c.cfg.MaxPerPass-len(out)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, 0, fmt.Errorf("receipts: cleanup: read %s: %w", c.cfg.OriginStream, err)
		}
		got, wrapped := 0, false
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return nil, 0, err
			}
			if now.Sub(meta.Timestamp) < c.cfg.Grace {
				wrapped = true
				break
			}
			s := scanned{seq: meta.Sequence.Stream, subject: m.Subject(), stored: meta.Timestamp,
				bytes: msgBytes(m), redriven: m.Headers().Get(receipt.RedriveHeader) != ""}
			s.id, s.idErr = c.eventID(m)
			out = append(out, s)
			if meta.NumPending == 0 {
				wrapped = true
				break
			}
		}
		if err := batch.Error(); err != nil && !wrapped {
			return nil, 0, fmt.Errorf("receipts: cleanup: read %s: %w", c.cfg.OriginStream, err)
		}
		if wrapped || got == 0 {
			return out, 0, nil
		}
	}
	return out, out[len(out)-1].seq + 1, nil
}
