// Package kvstore keeps completion records in a JetStream KV bucket, one
// record per event, with a KV status index: the layout before L1's
// completion state (package completion/state). L1 boxes import it once
// into their completion log; it stays as the reference that the
// differential test compares the completion state against.
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
// A write whose answer is lost (node killed, leader change, reconnect) is
// resolved before Apply returns: it re-reads until the record shows whether
// this very write landed (the processor's receipt_id plus this attempt's
// received_at), so Applied stays exactly-once across instances even then.
//
// The counters are at-least-once: a write whose acknowledgement is lost
// while another writer changes the record is retried and may count one
// receipt twice. The recorded status is exact.
//
// # Batches
//
// Store.ApplyBatch (what the Service uses by default, ServiceConfig.ApplyBatch)
// makes the same decisions as Apply for each receipt, in order, but writes
// the records of up to MaxApplyBatch events with one atomic batch publish to
// the bucket's stream (Setup sets AllowAtomicPublish on it): one disk flush
// per batch instead of one per receipt. The receipts of one event are
// folded into one record write. Each message of the batch carries the
// compare-and-set of a single write (Nats-Expected-Last-Subject-Sequence:
// the revision read, 0 for a new key), which the server checks per message
// inside an atomic batch, and commits all of them or none. If any
// expectation fails (another instance got in between) or the batch is
// refused, nothing of it was written and its receipts are applied one by
// one as above; a batch whose answer is lost is read back (one record
// found as written means all were) or else applied one by one. So the
// rules above hold unchanged for batches. The index entries that become
// true are written before the batch; the removals follow it.
//
// # Status index
//
// List and Summary never scan the completion bucket. A second KV bucket
// (IndexBucket, default "<Bucket>_index") holds one small key per fact:
//
//	p.=.<tok>  p.<site>.<tok>   event pending / site has not reported
//	d.=.<tok>  d.<site>.<tok>   event / site dead_lettered
//	c.=.<tok>  c.<site>.<tok>   event / site has a conflict
//
// (<tok> = base64url(event_id); "=" is no site name; the value is
// published_at.) Why an index bucket rather than a bounded scan of the
// records: the interesting events (pending, overdue, dead_lettered) are few
// among many completed ones, so a scan with a bound would return mostly empty
// pages and could not count. With the index a page is one batched direct get
// of the matching keys from a stream sequence (the cursor), bounded by
// MaxListScan entries and Limit record reads; a count is one direct get (its
// Nats-Num-Pending header); and the entries sit in roughly the order events
// entered the state, so the oldest pending events come first. Memory per
// query is O(Limit).
//
// The index is kept without multi-key transactions by ordering and
// monotonicity: entries that become true are written BEFORE the record;
// entries that became false are removed AFTER it (stream purge, which leaves
// no marker; "p.*.<tok>" in one purge when the event is fully reported), and
// only when they can never be true again — a processor's first status is
// final, the expected set is written once, and an event that stopped being
// pending never is again. So the index is always a superset of the truth;
// List checks every candidate against its record and skips (and, when safe,
// removes) stale entries; a repeat of a receipt redoes its removals, and the
// Service ACKs only after them, so a crash in between is repaired by the
// redelivery.
package kvstore
