package runner

import (
	"fmt"
	"time"

	"github.com/leafline/leafline/receipt"
)

// expire runs as the committer reaches a batch, before the sink write: an
// item whose deadline has passed is marked expired and gets an expired
// receipt instead of being handed to the sink. Its receipt is committed,
// published and PubAck'ed like a dead-lettered one before the message is
// ACKed.
//
// The outbox decides first, so that an event ends with one terminal status
// across deliveries: a receipt already stored for the event (expired, or
// processed by an earlier delivery that was not ACKed) stands, whatever
// the clock says now. An outbox read error holds the item (no ACK).
func (r *Runner) expire(items []item) {
	now := time.Now()
	n := 0
	for i := range items {
		it := &items[i]
		if !it.expires || it.err != nil || it.hold != nil || !it.hasRec {
			continue
		}
		rec, err := r.digestReceiptRecord(it.ev.ID, it.ev.Subject, receipt.StatusExpired, "deadline "+it.deadline.UTC().Format(time.RFC3339), it.digest)
		if err != nil {
			it.hold = err
			continue
		}
		_, wasExpired, err := r.ob.Get(rec.Key)
		if err != nil {
			it.hold = fmt.Errorf("expiry: %w", err)
			continue
		}
		if !wasExpired {
			if now.Before(it.deadline) {
				continue
			}
			_, wasProcessed, err := r.ob.Get(it.rec.Key)
			if err != nil {
				it.hold = fmt.Errorf("expiry: %w", err)
				continue
			}
			if wasProcessed {
				continue
			}
		}
		it.expired, it.rec = true, rec
		r.step("expired", it)
		r.log.Debug("expired: not handed to the sink", r.attrs(it, "deadline", it.deadline)...)
		n++
	}
	if n > 0 {
		r.log.Info("expired events not handed to the sink; each gets an expired receipt", "events", n)
	}
}
