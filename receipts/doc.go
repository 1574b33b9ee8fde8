// Package receipts defines leafline's business receipt — a processor's
// durable statement "I reached a terminal status for event X" — its codec,
// and the L1 completion service that records each receipt once.
//
// Receipts are the return path of the event flow. Events go L1 → hub → edge
// by JetStream sourcing; after an edge has processed an event (or dead
// lettered it) it publishes a receipt to its local receipts stream and only
// then ACKs the event. The receipts are sourced edge → hub (RH) → L1 (R1),
// where a Service consumes them and records completion in a KV bucket.
//
// This package imports no other leafline package.
//
// # Receipt format (version 1)
//
// A receipt is one JSON object, at most MaxEncodedSize bytes:
//
//	{"v":1,
//	 "receipt_id":"01890a5d-ac96-774b-bcce-b302099a8057",
//	 "event_id":"evt-123",
//	 "origin_stream":"L1A",
//	 "processor":"edge-7",
//	 "site":"edge-7",
//	 "status":"processed",
//	 "processed_at":"2026-01-02T03:04:05.123456789Z",
//	 "reason":"..."}                       // optional
//
// status is "processed" or "dead_lettered"; reason is a short, safe text for
// dead-lettered events (never the payload). See Receipt.Validate for every
// rule. Decode is strict: unknown or duplicate keys, wrong types, null,
// missing fields and trailing data are errors wrapping ErrMalformed, so a
// receipt written by a newer, incompatible producer is quarantined rather
// than half-understood. A format change bumps "v" (SchemaVersion); a decoder
// only accepts the versions it knows.
//
// # Message id
//
// Receipts are published with Nats-Msg-Id = Receipt.MsgID():
//
//	"rcpt-" + hex(sha256(event_id + "\x00" + processor + "\x00" + status))
//
// The id names the assertion, not the message. It leaves out receipt_id and
// processed_at because a processor that re-processes a redelivered event
// (or whose outbox relay republishes after a crash) creates a new receipt
// for the same assertion, and the two must collide. It leaves out stream
// sequences because they differ at every hop (edge, RH, R1) and after
// re-sourcing; only business identity survives the chain. It keeps status so
// that a dead_lettered receipt is not swallowed by an earlier processed one
// (or the reverse): the completion service must see the conflict to count it.
//
// # KV keys
//
// The completion of an event lives under KVKey(event_id) =
// "e." + base64.RawURLEncoding(event_id). KV keys allow only
// [-/_=.a-zA-Z0-9] and use '.' as a token separator; the unpadded URL-safe
// base64 alphabet is [A-Za-z0-9_-], so any event_id — with dots, '*', '>',
// spaces or non-ASCII — maps to a valid two-token key, distinct ids map to
// distinct keys, and "e.>" lists all completions. The original id is stored in
// the value (Completion.EventID).
//
// # Once per (event_id, processor)
//
// Store.Apply reads the event's record, folds the receipt in, and writes it
// back with kv.Create (key absent) or kv.Update(key, value, revision)
// (compare-and-set on the revision it read). The server accepts a write only
// if the key is still at the revision the writer saw, so when two instances —
// or two goroutines, or one instance and a redelivery — race on one event,
// exactly one write wins; the loser re-reads, finds the processor already
// recorded, and counts its receipt as a duplicate instead. Hence, across any
// number of Services sharing the bucket:
//
//   - the first terminal status per (event_id, processor) is recorded once
//     and never overwritten (Apply reports applied=true exactly once);
//   - a later receipt with the same status increments Duplicates;
//   - a later receipt with a different status increments Conflicts.
//
// The counters are at-least-once: a write whose acknowledgement is lost is
// retried and may count one receipt twice. The recorded status is exact.
//
// # Service message handling
//
// Commit first, ACK last, design for redelivery. For each message of the
// durable pull consumer, exactly one of:
//
//   - valid receipt → Store.Apply → ACK only after Apply returned nil;
//   - malformed, rejected by ServiceConfig.Accept, or a corrupt stored record
//     (errors matching ErrQuarantine) → publish a QuarantineRecord on
//     "<QuarantineSubject>.receipts" with Nats-Msg-Id "rq-<stream>-<seq>",
//     wait for the PubAck, then ACK;
//   - anything else (KV or quarantine stream unavailable, timeouts) → NAK with
//     a delay that doubles per delivery up to MaxRetryDelay; never ACK.
//
// Bad input never stops the service.
//
// # Caveats
//
//   - A receipt does NOT acknowledge anything on the origin stream (L1A).
//     ACKs are per consumer and per stream; they never travel along sourcing,
//     and no consumer on L1A knows about the edge's delivery. A completion
//     record is the business fact "processor P finished event X"; whether
//     and how L1A messages are cleaned up is a separate, auditable decision
//     (and with LimitsPolicy retention an ACK would not delete them anyway).
//   - A receipt stored at the edge only means it is safe at the edge. Only a
//     completion record at L1 means L1 knows.
//   - Nats-Msg-Id deduplication lasts only for a stream's duplicate window
//     (2 minutes by default) and only within one stream. Receipts republished
//     later, or arriving via another path, reach the service again. The KV
//     bucket is the durable dedupe: never delete or purge completion keys,
//     and never give the bucket a TTL.
//   - The first status wins. If an event is dead-lettered and later replayed
//     successfully by the same processor, the record keeps dead_lettered and
//     counts a conflict; resolving that is an operator action.
//   - Store.All reads the whole bucket; it is for tests, demos and small
//     deployments.
package receipts
