package outbox

import (
	"fmt"
	"time"
)

// Assumptions of AddressSpaceWarnings, stated in its warnings.
const (
	// lintEventRate is the sustained rate, in events per second, that the
	// estimate assumes an edge may see.
	lintEventRate = 10
	// receiptFileBytes is the file space one published receipt takes: the
	// signed receipt, its index entries, and pages that random keys leave
	// partly empty.
	receiptFileBytes = 1536
	// storedEventFileBytes is the file space the store sink takes for an
	// event of 1 KiB: the payload base64-encoded in JSON, its key, and
	// partly empty pages.
	storedEventFileBytes = 3072
)

// Warning is a setting of an edge's config that can fill its outbox, and
// why.
type Warning struct {
	Setting string // "sink.type", "outbox.retention"
	Msg     string
}

// AddressSpaceWarnings reports what could fill an edge's outbox file past
// MaxSize32 on a platform with 32-bit pointers, where the box then stops
// processing (ErrFull): the store sink (sinkType "store"), which never
// deletes an event, and a retention of published receipts that keeps more
// of them than fit at lintEventRate. `leafline check` runs it on such a
// platform.
func AddressSpaceWarnings(sinkType string, retention time.Duration) []Warning {
	const limitMiB = MaxSize32 >> 20
	var out []Warning
	if sinkType == "store" {
		out = append(out, Warning{"sink.type", fmt.Sprintf(
			"%q keeps every event in the outbox file (bucket \"events\") and never deletes one; on this 32-bit platform the file may not grow past %d MiB (bbolt maps all of it into an address space of 2 to 3 GiB), about %d events of 1 KiB at %d bytes of file each, and the box then stops processing; use the file sink or a sink outside the box",
			sinkType, limitMiB, MaxSize32/storedEventFileBytes, storedEventFileBytes)})
	}
	if need := retention.Seconds() * lintEventRate * receiptFileBytes; need > MaxSize32 {
		fit := time.Duration(MaxSize32/(lintEventRate*receiptFileBytes)) * time.Second
		out = append(out, Warning{"outbox.retention", fmt.Sprintf(
			"%s keeps every published receipt that long: at %d events/s and about %d bytes of outbox file per receipt that is %.0f MiB, more than the %d MiB the file may grow to on this 32-bit platform (bbolt maps all of it into an address space of 2 to 3 GiB), and the box then stops processing; lower it to %s or less, or to %d MiB ÷ (the box's own rate × %d bytes)",
			retention, lintEventRate, receiptFileBytes, need/(1<<20), limitMiB, fit.Truncate(time.Hour), limitMiB, receiptFileBytes)})
	}
	return out
}
