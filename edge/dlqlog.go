package edge

import "errors"

// logDeadLetter logs a dead-lettered message: at WARN the delivery whose
// DLQ record was PubAck'ed, at INFO a redelivery of a message dead-lettered
// before (its record is not published again). The line carries the
// event_id (empty when the message has none, with event_id_error saying
// why), the error type and the DLQ subject; never the payload or headers.
func (r *runner) logDeadLetter(it *item) {
	attrs := r.attrs(it, "error_type", errorType(it.err), "dlq_subject", r.cfg.DeadLetter.Subject,
		"term", r.cfg.DeadLetter.AckTermAfterPub)
	if it.ev.ID == "" && errors.Is(it.err, ErrNoEventID) {
		attrs = append(attrs, "event_id_error", it.err.Error())
	}
	if !it.newDead {
		r.log.Info("dlq: already dead-lettered by an earlier delivery", attrs...)
		return
	}
	r.log.Warn("dlq: dead-lettered", attrs...)
}
