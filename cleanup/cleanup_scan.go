package cleanup

import (
	"context"
	"fmt"
	"time"

	"github.com/leafline/leafline/internal/jsmsg"
	"github.com/leafline/leafline/receipt"
	"github.com/nats-io/nats.go/jetstream"
)

// scanFetch is the batch one fetch of the scan asks for.
const scanFetch = 256

// scanned is one origin message as the scan read it.
type scanned struct {
	seq      uint64
	subject  string
	id       string
	idErr    error
	stored   time.Time
	bytes    int64
	redriven bool // carries RedriveHeader
}

// scan is what one pass read of the origin stream, and how.
type scan struct {
	msgs []scanned
	// next is where the next pass starts (0: from the first message).
	next uint64
	// fromFirst: msgs begin at the stream's first message and hold every
	// message up to the last of them.
	fromFirst bool
	// created is the stream's creation time when the scan began.
	created time.Time
	// fill is how full the stream was (FillOf); pressure says it was at
	// least PressureAt, and grace is the grace period in force: Grace, or
	// PressureGrace under pressure.
	fill     float64
	pressure bool
	grace    time.Duration
	now      time.Time
}

// FillOf is how full a stream is against its limits: the larger of its
// bytes over MaxBytes and its messages over MaxMsgs, 0 without limits.
func FillOf(info *jetstream.StreamInfo) float64 {
	f := 0.0
	if m := info.Config.MaxBytes; m > 0 {
		f = float64(info.State.Bytes) / float64(m)
	}
	if m := info.Config.MaxMsgs; m > 0 {
		f = max(f, float64(info.State.Msgs)/float64(m))
	}
	return f
}

// scan reads up to MaxPerPass origin messages in sequence order from the
// cursor (from the stream's first message when the cursor is behind it or
// past its end, or when that first message can go now: the purge of the
// head is what keeps up with a full stream), stopping at the first message younger than the grace in
// force: none after it can be eligible. The next pass starts after the
// last one read, or from the beginning again once the young end or the
// end of the stream was reached.
func (c *Cleaner) scan(ctx context.Context, st jetstream.Stream, now time.Time, dryRun bool) (scan, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return scan{}, fmt.Errorf("receipts: cleanup: origin stream %s: %w", c.cfg.OriginStream, err)
	}
	sc := scan{created: info.Created, fill: FillOf(info), grace: c.cfg.Grace, now: now}
	if sc.fill >= c.cfg.PressureAt {
		sc.pressure, sc.grace = true, min(c.cfg.Grace, c.cfg.PressureGrace)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	c.mu.Lock()
	start := c.cursor
	c.mu.Unlock()
	if info.State.Msgs == 0 {
		return sc, nil
	}
	if dryRun || start < first || start > last || c.headDone(ctx, st, first, now, sc.grace) {
		start = first
	}
	sc.fromFirst = start == first
	oc, err := c.cfg.JS.OrderedConsumer(ctx, c.cfg.OriginStream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   start,
		HeadersOnly:   c.cfg.OriginEventID == nil,
	})
	if err != nil {
		return scan{}, fmt.Errorf("receipts: cleanup: read %s: %w", c.cfg.OriginStream, err)
	}
	for len(sc.msgs) < c.cfg.MaxPerPass {
		batch, err := oc.Fetch(min(scanFetch, c.cfg.MaxPerPass-len(sc.msgs)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return scan{}, fmt.Errorf("receipts: cleanup: read %s: %w", c.cfg.OriginStream, err)
		}
		got, wrapped := 0, false
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return scan{}, err
			}
			if now.Sub(meta.Timestamp) < sc.grace {
				wrapped = true
				break
			}
			s := scanned{seq: meta.Sequence.Stream, subject: m.Subject(), stored: meta.Timestamp,
				bytes: msgBytes(m), redriven: m.Headers().Get(receipt.RedriveHeader) != ""}
			s.id, s.idErr = c.eventID(m)
			sc.msgs = append(sc.msgs, s)
			if meta.NumPending == 0 {
				wrapped = true
				break
			}
		}
		if err := batch.Error(); err != nil && !wrapped {
			return scan{}, fmt.Errorf("receipts: cleanup: read %s: %w", c.cfg.OriginStream, err)
		}
		if wrapped || got == 0 {
			return sc, nil
		}
	}
	sc.next = sc.msgs[len(sc.msgs)-1].seq + 1
	return sc, nil
}

// headDone reports whether the stream's first message, at seq first, can
// be deleted now: a pass that stopped at MaxPerPass goes on from its
// cursor while the head waits for its event, and starts again from the
// head once it can go.
func (c *Cleaner) headDone(ctx context.Context, st jetstream.Stream, first uint64, now time.Time, grace time.Duration) bool {
	raw, err := st.GetMsg(ctx, first)
	if err != nil {
		return false
	}
	m := jsmsg.Stored(raw)
	meta := scanned{seq: first, subject: raw.Subject, stored: raw.Time, redriven: raw.Header.Get(receipt.RedriveHeader) != ""}
	if now.Sub(raw.Time) < grace {
		return false
	}
	meta.id, meta.idErr = c.eventID(m)
	d, err := c.decide(ctx, &meta, now, grace)
	return err == nil && d.skip == ""
}
