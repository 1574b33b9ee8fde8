package completion

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
)

// A receipt speaks only for the site that sent it. Three checks bind what
// a receipt says to where it came from, each optional so that the package
// also serves deployments that bind identity elsewhere:
//
//   - ServiceConfig.SubjectPrefix: the subject names the receipt's own site
//     and status. Where each link can only deliver its own site's subjects
//     (leafline's hub rewrites the site token of everything an edge's link
//     delivers), the subject is the link's identity.
//   - ServiceConfig.ProcessorIsSite: a site reports only for itself, so a
//     signature checked against the site's key (Verify) binds the
//     processor too.
//   - With origin tracking, a receipt counts only from a processor the
//     event was routed to (ErrNotExpected), and a receipt for an event
//     whose origin is unknown is held (StoreConfig.HoldUntilOrigin).

// Refusal reasons: the label under which a quarantined receipt is counted
// (Service.Refusals).
const (
	RefusedMalformed        = "malformed"
	RefusedInvalid          = "invalid"
	RefusedSubjectMismatch  = "subject_mismatch"
	RefusedProcessorNotSite = "processor_not_site"
	RefusedNotExpected      = "processor_not_expected"
	RefusedBadSignature     = "bad_signature"
	RefusedRejected         = "rejected"
	RefusedCorruptRecord    = "corrupt_record"
	// RefusedOriginUnknown: held for an event whose origin was not seen
	// within ServiceConfig.HoldFor (held.go).
	RefusedOriginUnknown = "origin_unknown"
	// RefusedHeldLimit: held for an event whose origin is unknown, the
	// oldest of its site's when the site held more than its bound
	// (ServiceConfig.HeldMaxPerSite, held_limit.go).
	RefusedHeldLimit = "held_limit"
)

// RefusalReasons lists every refusal reason, in a fixed order.
var RefusalReasons = []string{
	RefusedMalformed, RefusedInvalid, RefusedSubjectMismatch, RefusedProcessorNotSite,
	RefusedNotExpected, RefusedBadSignature, RefusedRejected, RefusedCorruptRecord, RefusedOriginUnknown,
	RefusedHeldLimit,
}

// RefusalReason names the reason a receipt was quarantined for: err is the
// error that sent it to quarantine (it matches ErrQuarantine).
func RefusalReason(err error) string {
	switch {
	case errors.Is(err, ErrSubjectMismatch):
		return RefusedSubjectMismatch
	case errors.Is(err, ErrProcessorNotSite):
		return RefusedProcessorNotSite
	case errors.Is(err, record.ErrNotExpected):
		return RefusedNotExpected
	case errors.Is(err, receipt.ErrBadSignature):
		return RefusedBadSignature
	case errors.Is(err, record.ErrCorruptRecord):
		return RefusedCorruptRecord
	case errors.Is(err, receipt.ErrMalformed): // before ErrInvalid: a decoded receipt failing Validate matches both
		return RefusedMalformed
	case errors.Is(err, receipt.ErrInvalid):
		return RefusedInvalid
	}
	return RefusedRejected
}

// refusals counts quarantined receipts per reason.
type refusals [10]atomic.Uint64

func (r *refusals) add(reason string) {
	if i := slices.Index(RefusalReasons, reason); i >= 0 {
		r[i].Add(1)
	}
}

func (r *refusals) snapshot() map[string]uint64 {
	out := make(map[string]uint64, len(RefusalReasons))
	for i, reason := range RefusalReasons {
		out[reason] = r[i].Load()
	}
	return out
}

// Refusals returns, per refusal reason (every one of RefusalReasons), the
// number of receipts this Service stored a new quarantine record for.
func (s *Service) Refusals() map[string]uint64 { return s.refused.snapshot() }

// bind checks that a well-formed receipt speaks only for the site that sent
// it (see above); a refusal wraps ErrSubjectMismatch or ErrProcessorNotSite.
func (s *Service) bind(r receipt.Receipt, subject string) error {
	if p := s.cfg.SubjectPrefix; p != "" {
		want := p + "." + r.Site + "." + string(r.Status)
		if base, _ := receipt.SplitClass(p, subject); base != want {
			return fmt.Errorf("%w: subject %s, but the receipt says site %s, status %s (want %s)",
				ErrSubjectMismatch, receipt.ShortQuote(subject), r.Site, r.Status, want)
		}
	}
	return s.bindProcessor(r)
}

// bindProcessor refuses, with ProcessorIsSite, a receipt whose site
// reports for another processor (ErrProcessorNotSite).
func (s *Service) bindProcessor(r receipt.Receipt) error {
	if s.cfg.ProcessorIsSite && r.Processor != r.Site {
		return fmt.Errorf("%w: site %s reports for processor %s; a site reports only for itself",
			ErrProcessorNotSite, r.Site, r.Processor)
	}
	return nil
}

// countReleased counts and logs what an origin merge did with the held
// receipts of event id.
func (s *Service) countReleased(meta *jetstream.MsgMetadata, id string, hr record.HeldRelease) {
	// A released receipt is recorded now: Applied counts it, as it counts
	// every (event_id, processor) pair recorded.
	s.applied.Add(uint64(len(hr.Released)))
	s.heldReleased.Add(uint64(len(hr.Released)))
	s.heldRefused.Add(uint64(len(hr.Refused)))
	if len(hr.Released)+len(hr.Refused) > 0 {
		s.heldTally.forget(id)
	}
	if len(hr.Refused) > 0 {
		s.log.Warn("receipts: held receipts refused: the event was not routed to their processors",
			append(logAttrs(meta), "event_id", receipt.ShortQuote(id), "refusal", RefusedNotExpected, "processors", hr.Refused)...)
	}
}
