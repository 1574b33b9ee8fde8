// Package l1 is the l1 role of a leafline box (see package box): the
// origin site, where the events are published and where the receipts of
// every edge come back. It runs the completion service (package
// completion) on the receipts stream R1 and the origin stream L1A, with
// its state in the data dir (completion.db, derived from the completion
// log and rebuilt from it if lost); it serves the status API over HTTP and
// NATS micro (package status), the console (package status/console), the
// cleanup of the origin stream (package cleanup), and it owns the
// consumers of direct-mode edges on L1A (direct_guard.go).
//
// What it guarantees is the completion service's: each (event_id,
// processor) is recorded once, from a receipt that was PubAck'ed by the
// edge's receipts stream before the edge ACKed its event; a receipt is
// ACKed on R1 only after its record is durable; the status API never
// answers from a state that has not folded its log (/readyz is 503 until
// it has); nothing on L1A is deleted but by the cleanup, after the event's
// audit record was PubAck'ed.
package l1
