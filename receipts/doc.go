// Package receipts defines leafline's business receipt — a processor's
// durable statement "I reached a terminal status for event X" — its codec,
// and the L1 completion service that records each receipt once.
//
// Receipts are the return path of the event flow. Events go L1 → hub → edge
// by JetStream sourcing; after an edge has processed an event (or dead
// lettered it) it publishes a receipt to its local receipts stream and only
// then ACKs the event. The receipts are sourced edge → hub (RH) → L1 (R1),
// where a Service consumes them and records completion in a KV bucket. The
// same Service follows the origin stream (L1A) so that every published event
// has a record — pending until its expected processors report — and answers
// "what happened to event X?" over HTTP (NewHTTPHandler), a NATS micro
// service (StartMicro, StatusClient) and Go (Service.Get, List, Summary).
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
//	 "reason":"...",                       // optional
//	 "payload_sha256":"9f86d0…"}            // optional
//
// status is "processed" or "dead_lettered"; reason is a short, safe text for
// dead-lettered events (never the payload); payload_sha256 is PayloadDigest
// of the payload the processor received (see Receipt.PayloadSHA256). See
// Receipt.Validate for every rule. Decode is strict: unknown or duplicate
// keys, wrong types, null, missing fields and trailing data are errors
// wrapping ErrMalformed, so a receipt written by a newer, incompatible
// producer is quarantined rather than half-understood. A change that alters
// the meaning of a field bumps "v" (SchemaVersion); a decoder only accepts
// the versions it knows. An optional field is added without a bump, and a
// decoder that predates it quarantines the receipts that carry it: upgrade
// L1 before its edges (a quarantined receipt's event stays pending, and
// L1's redrive has it receipted again once L1 understands it).
//
// # Message id
//
// Receipts are published with Nats-Msg-Id = Receipt.MsgID():
//
//	"rcpt-" + ordered64(event_id[:24]) + "." + ordered64(sha256(event_id + "\x00" + processor + "\x00" + status))
//
// ordered64 is unpadded base64 over an alphabet in ASCII order; an id is
// at most 5+32+1+43 = 81 bytes. The hash names the assertion. The prefix,
// the event id's first 24 bytes, only makes ids sort as the event ids do:
// the edge's outbox appends the receipts of time-ordered ids instead of
// scattering them over its B+tree. Releases before this one used
// "rcpt-" + hex(sha256(…)) alone: across an upgrade, a receipt that both
// releases publish (an event redelivered after it) gets two ids, so
// neither the edge's outbox nor the receipts stream's duplicate window
// sees the repeat, and L1 counts it as a duplicate. Nothing is lost or
// applied twice.
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
// # Bundles
//
// An edge publishes the receipts of one batch that it publishes for the
// first time as bundles (bundle.go): one message of up to
// MaxBundleReceipts receipts and MaxBundleBytes on
// "<prefix>.<site>.bundle", the receipts exactly as Encode wrote them
// joined by newlines, BundleHeader giving their count, Nats-Msg-Id
// BundleMsgID of theirs, and one signature over the whole body. The
// receipt path then stores, moves and acknowledges one message per bundle
// at every hop, with either link transport. A receipt that may have been
// published before (a redelivered event's, a republish by the outbox
// relay) goes alone, under its own Nats-Msg-Id, so that a copy inside a
// receipts stream's duplicate window is dropped there; the repeat of a
// receipt first published in a bundle whose PubAck was lost is stored
// again, and L1 counts it as a duplicate. A Service reads both kinds:
// upgrade L1 before its edges.
//
// # Signatures
//
// An edge with a signing key signs its receipts (SignatureHeader); L1
// verifies them against the site's public key (ServiceConfig.Verify) and
// quarantines any that is unsigned, forged or altered. A receipt is signed
// on its own, or as one of a group of up to 16 of an atomic batch: the
// signature then covers the root of a SHA-256 tree of the group's
// receipts, and the receipt carries its path to the root (ProofHeader).
// Either way each receipt verifies alone, with nothing but its own bytes
// and headers; no change to a receipt, its proof or its count verifies
// (short of a SHA-256 second preimage). A Verifier checks both kinds and
// verifies each group's signature once. A bundle is signed once, over
// bundleDomain ‖ body, and verified whole (Verifier.VerifyMsg): its
// receipts carry no signature of their own.
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
// # Completion record and status
//
// A Completion holds, per event: the origin stream, subject and the time the
// event was stored there (published_at, from the origin message's stream
// timestamp), the expected processors, and per processor the first terminal
// status with its site, processed_at (edge clock), received_at (L1 clock),
// and the duplicate and conflict counters. Its overall status is derived:
//
//   - dead_lettered: some processor reported dead_lettered;
//   - complete: the origin was seen and every expected processor reported
//     processed (vacuously, when none is expected);
//   - pending: otherwise — including while the origin message has not been
//     seen, because only it says which processors to wait for;
//   - origin_unknown: with origin tracking, only held receipts so far (see
//     "Identity"); it lists and counts as pending.
//
// conflict is set when any conflicting receipt was counted. Overdue is a
// read-time view: a pending event published at least OverdueAfter ago (per
// site: the site has not reported an event published that long ago).
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
// # Origin tracking
//
// With ServiceConfig.OriginStream the Service runs a second loop with its own
// durable pull consumer on the origin stream. For each message it takes the
// event_id (header OriginHeader, default Nats-Msg-Id, or OriginEventID), asks
// Expected(subject) for the processors, and calls Store.ApplyOrigin: create a
// pending record if none exists, or merge published_at and the expected set
// into the record that receipts created first (keeping all their data, by
// compare-and-set); a record that already knows its origin is left alone (the
// first publication of an event_id wins). It ACKs its own consumer only.
//
// # Identity
//
// A receipt speaks only for the site that sent it (see binding.go). With
// SubjectPrefix its subject must name its own site and status; with
// ProcessorIsSite its processor must be its site, so that Verify's check
// against the site's key binds the processor too. With origin tracking a
// receipt from a processor the event was not routed to is quarantined
// (ErrNotExpected), and one for an event whose origin has not been seen is
// held in the record (Completion.Held, status origin_unknown) where it
// counts for nothing: a dead_lettered receipt counts only from an expected
// processor, and a receipt for an event that was never published never
// makes a normal record. The origin merge releases the held receipts of
// expected processors and sets the others aside (Completion.Unexpected);
// receipts held HoldFor with no origin are quarantined (refusal
// origin_unknown) and their record removed.
// Every refusal is quarantined, counted per reason (Service.Refusals) and
// logged with its reason.
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
//
// # Service message handling
//
// Commit first, ACK last, design for redelivery. Each receipt of a message
// of the durable pull consumer (one, or a bundle's) ends in one of:
//
//   - valid receipt → recorded by the State (Store.Apply: index and
//     record);
//   - malformed, rejected by ServiceConfig.Accept, or a corrupt stored record
//     (errors matching ErrQuarantine) → publish a QuarantineRecord on
//     "<QuarantineSubject>.receipts" with Nats-Msg-Id "rq-<stream>-<seq>"
//     (and "-<index>" for one receipt of a bundle), and wait for the
//     PubAck;
//   - anything else (KV or quarantine stream unavailable, timeouts,
//     ErrIndexIncomplete) → the message must come again.
//
// The message is ACKed only once every receipt of it was recorded or
// quarantined (the failpoint l1.after_kv_write, see internal/failpoint,
// kills the process between the two: the redelivery counts Duplicates);
// otherwise it is NAKed with a delay that doubles per delivery up to
// MaxRetryDelay, and the receipts already recorded count as duplicates
// when it comes again. A bundle that cannot be read, that does not speak
// for one site (its subject's), or whose signature fails is quarantined
// whole, as one record.
//
// Messages are applied in batches of up to ApplyBatch (default 128) by
// min(InFlight, 4) workers chosen by a hash of the event_id: different
// events in parallel, one event's receipts in order, each message ACKed
// only after its batch committed (and, for a quarantined one, after its
// quarantine PubAck). A kill between the commit and the ACKs leaves the
// batch's messages unACKed: their redeliveries count as Duplicates. With
// ApplyBatch 1, InFlight lanes (default 64) apply one message each. Memory is bounded by BatchSize
// (pull buffer) plus 3×InFlight messages whatever the backlog. Bad input never
// stops the service.
//
// # Cleanup
//
// A Cleaner (off unless the L1 box enables completion.cleanup) deletes
// origin messages whose events are done, so that L1A holds the unfinished
// work instead of everything or whatever its limits keep. A pass reads
// L1A in sequence order (headers only when the event_id is a header) and
// deletes a message only when all of these hold:
//
//   - the completion record of its event_id knows the origin, and its
//     recorded origin sequence is this message's sequence (or the message
//     is a redrive copy, RedriveHeader set, at a later sequence); any other
//     message is a mismatch: logged once, counted, and never deleted;
//   - every expected processor reported a terminal status: processed, or
//     dead_lettered with CleanupConfig.AllowDeadLettered; an event with a
//     conflict is left to an operator;
//   - Grace has passed since the last of those receipts and since the
//     message was stored, and this process has not redriven the event
//     within Grace.
//
// Commit first: the pass writes an AuditRecord (the receipts that justified
// it, who decided and when) to the audit stream and waits for its PubAck,
// then reads the message at the sequence again, deletes it only if it still
// carries the event_id, and only then counts it. A crash after the record
// leaves a record without a delete; the next pass finds the record (its
// subject names the event and the sequence, and every record is published
// expecting its subject empty), writes none again and deletes. Two
// cleaners deciding one message write one record (that expectation, and
// Nats-Msg-Id = the event_id) and delete it once: the second delete finds
// nothing and is counted as gone. A pass never deletes by a sequence it did
// not read back with the expected event_id.
//
// Caveats: an audit record states a decision; if the stream's own limits
// remove the message first, the record stands for a delete that the limits
// did. The redrive state of another L1 instance is not visible: a copy it
// publishes is a message of its own, cleaned when it is old enough, and the
// event it copies is complete, so deleting the first publication loses
// nothing. The audit stream uses DiscardNew: when it is full, deletes stop.
//
// # Clusters
//
// The Service needs only a JetStream context: it runs the same against the
// embedded server or an external cluster. With Replicas 3 the buckets and the
// quarantine stream it creates are R3 (the receipts and origin streams are
// created by the caller). Any number of instances may run at once: they share
// the durable consumers (each message goes to one of them), and every write
// is a create or compare-and-set, so none is applied twice; the status
// queries may go to any instance. TestCluster_R3_TwoInstances_ServerKilled
// kills a node under two instances and checks exactly-once application.
//
// # Caveats
//
//   - Summary counts come from the index as it is. A crash between a
//     record's write and the removal of its stale index entries (e.g. a
//     node killed mid-apply) leaves extra entries: Summary may over-count
//     pending events for that site until a listing of that status (leafline
//     pending, GET /v1/events?status=pending) reads and repairs them. It
//     never under-counts, and List and Get are always exact.
//   - A receipt does NOT acknowledge anything on the origin stream (L1A).
//     ACKs are per consumer and per stream; they never travel along sourcing,
//     and no consumer on L1A knows about the edge's delivery (seed 004). A
//     completion record is the business fact "processor P finished event X";
//     whether and how L1A messages are cleaned up is a separate, auditable
//     decision (see Cleanup). The origin tracker's own consumer ACKs only
//     to record its progress: Setup refuses an origin stream without
//     LimitsPolicy retention, where such an ACK could delete or release
//     anything.
//   - Expected processors are those Expected returns when the origin message
//     is first seen; a later topology change does not alter existing records.
//     A processor is identified by its name; List and Summary call it a site
//     (leafline edges use their site name as processor name).
//   - An event whose origin message is never seen stays pending forever
//     when tracking is off, counted in Summary.PendingOriginUnknown, and is
//     never overdue. With tracking, its receipts are held (origin_unknown)
//     and, HoldFor after the last of them, quarantined and the record
//     removed (held.go): an event that left L1A before the tracker read it
//     loses its record that way too. The tracker starts at the beginning
//     of the origin stream (DeliverAll).
//   - Overdue uses published_at (L1's clock); processed_at comes from the
//     edge's clock and is informational.
//   - Summary counts index entries one after another (no snapshot) and may
//     include entries a crash left until they are repaired; overdue counts
//     and the oldest pending event come from scans bounded by MaxSummaryScan
//     (Truncated says so). List results are always checked against records,
//     but an entry rewritten during paging can appear on two pages.
//   - Lost ACKs (a node killed mid-batch) mean redelivery after AckWait; the
//     repeat is absorbed as a duplicate. After a reconnect the pull iterator
//     can briefly receive more than its buffer (nats.go reports a slow
//     consumer); those messages are redelivered after AckWait as well.
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
//     deployments. Never delete or purge index keys by hand while Services
//     run (a missing entry hides an event from List and Summary), and write
//     records only through a Store made by OpenStore: a bucket filled by an
//     unindexed writer (NewStore) is not in the index.
package receipts
