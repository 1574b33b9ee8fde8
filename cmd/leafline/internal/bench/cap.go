package bench

import "time"

// capBytes is the cap that the cap phase puts on the hub-edge link:
// 64,000 bytes a second (64KB/s, KB = 1000 bytes), in each direction.
const capBytes = 64_000

// capWarm is how long cap lets the restored link run before it measures:
// the relays find their consumers again and spend the window's worth
// their buckets start with.
const capWarm = 3 * time.Second

// capReceiptBatch is the edge's batch size in cap, unless --batch or
// --backlog-batch is given: it bundles a batch's receipts in one message,
// and a bundle of the default backlog batch (1000 receipts, some 100 KB)
// is more than a second of the cap. The relay moves such a message alone
// and then waits it off, so the rate up would come in steps of a bundle
// and a minute's average would depend on where the steps fall.
const capReceiptBatch = 100

// capBacklogs are the events cap preloads for a window of w: receipts
// enough to fill the link up for the window and then some (at least 120
// bytes each, bundled), and events enough to fill it down (at least
// size+50 bytes each, with their id and the relay's headers).
func capBacklogs(w time.Duration, size int) (up, down int) {
	secs := (w + capWarm + max(5*time.Second, w/4)).Seconds()
	return int(capBytes * secs / 120), int(capBytes * secs / float64(size+50))
}
