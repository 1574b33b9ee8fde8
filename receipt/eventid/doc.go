// Package eventid reads an event's id from a JetStream message, as the
// configuration's event_id section says: from a JSON field of the payload
// or from a header. The edge's sink runner keys its receipts and its sink
// writes by this id, and L1 reads the same id from its origin stream, so
// both sides must parse it one way: this package is that one way.
//
// A message without a usable id is a permanent failure at the edge: its
// runner dead-letters it, never retries it.
package eventid
