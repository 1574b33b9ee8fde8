package record

// Stats are the Service's counters since NewService. Each receipt
// delivered to the Service, alone or in a bundle, is counted in Received,
// and then in at most one of Applied, Held, Duplicates, Conflicts,
// Quarantined and Retried (none when it was NAKed unhandled at shutdown; a
// bundle quarantined whole counts one Quarantined, and a message NAKed
// counts one Retried); a held receipt is counted in
// Applied (and HeldReleased) too when the origin tracker releases it
// (there is no message then). The exception: a receipt whose record
// was written but whose index removals failed (ErrIndexIncomplete) counts
// its outcome AND Retried, because it is NAKed so that the repeat finishes
// the index. Summed over all instances, Applied is exactly the number of
// (event_id, processor) pairs recorded, unless the answer to a write stayed
// lost for longer than OpTimeout (the repeat then counts a Duplicate).
//
// The Origin* counters count messages of the origin stream the same way.
type Stats struct {
	Received    uint64 `json:"received"`    // messages delivered by the consumer, redeliveries included
	Applied     uint64 `json:"applied"`     // first terminal status for (event_id, processor) recorded
	Duplicates  uint64 `json:"duplicates"`  // same status as already recorded; counted in the KV record
	Conflicts   uint64 `json:"conflicts"`   // different status than already recorded; counted, not applied
	Quarantined uint64 `json:"quarantined"` // new quarantine records stored (PubAck'ed, not a dedupe hit)
	Retried     uint64 `json:"retried"`     // messages NAKed with a delay after a transient failure

	OriginReceived uint64 `json:"origin_received,omitempty"` // origin messages delivered to the tracker
	OriginTracked  uint64 `json:"origin_tracked,omitempty"`  // pending records created, or origins merged into receipts' records
	OriginKnown    uint64 `json:"origin_known,omitempty"`    // the record already knew its origin (redelivery, republished event_id)
	OriginSkipped  uint64 `json:"origin_skipped,omitempty"`  // no usable event_id or expected set; ACKed, not tracked
	OriginRetried  uint64 `json:"origin_retried,omitempty"`  // origin messages NAKed after a transient failure
	OriginReused   uint64 `json:"origin_reused,omitempty"`   // a known event_id with another payload (also in OriginKnown)
	Redriven       uint64 `json:"redriven,omitempty"`        // overdue events published again on the origin stream
	Resent         uint64 `json:"resent,omitempty"`          // events sent again to one edge that its hub released (Service.Resend)

	// Held counts receipts held because their event's origin was unknown
	// (a receipt Outcome, like Applied); HeldReleased and HeldRefused the
	// held receipts an origin merge then counted (an expected processor)
	// or set aside (Completion.Unexpected).
	Held         uint64 `json:"held,omitempty"`
	HeldReleased uint64 `json:"held_released,omitempty"`
	HeldRefused  uint64 `json:"held_refused,omitempty"`
	// HeldExpired counts held receipts quarantined because their event's
	// origin was not seen within HoldFor.
	HeldExpired uint64 `json:"held_expired,omitempty"`
	// HeldLimited counts held receipts quarantined because their site
	// held more than its bound (ServiceConfig.HeldMaxPerSite,
	// HeldMaxBytesPerSite).
	HeldLimited uint64 `json:"held_limited,omitempty"`
}
