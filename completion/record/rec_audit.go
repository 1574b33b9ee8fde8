package record

import "time"

// AuditRef points at an audit record: what the status API shows as
// "cleaned" for an event whose origin message was deleted.
type AuditRef struct {
	Stream    string    `json:"audit_stream"`
	Seq       uint64    `json:"audit_seq"`
	Subject   string    `json:"audit_subject"`
	DeletedBy string    `json:"deleted_by"`
	DecidedAt time.Time `json:"decided_at"`
}
