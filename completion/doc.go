// Package completion is L1's completion service: it consumes the receipts
// stream (and follows the origin stream) and records each receipt, once
// per (event_id, processor), in a State (package completion/state on an L1
// box; the KV layout of package completion/kvstore unless told otherwise),
// and answers "what happened to event X?" from it.
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
//
// Held receipts are bounded per site (HeldMaxPerSite, HeldMaxBytesPerSite):
// a site that sends receipts for events L1 never saw (a stolen edge forging
// event ids) costs L1 at most that much held state. Past either bound the
// site's oldest held events are quarantined (refusal held_limit, counted in
// Stats.HeldLimited) with every receipt held for them, and their records
// removed, before the receipts loop takes its next batch; a site is over
// its bound by at most the receipts of the batches being applied
// (4·ApplyBatch). As with HoldFor, the quarantine records are PubAck'ed
// before the removal, which is a compare-and-set on the record read: a
// crash in between leaves the receipts held and quarantines them again,
// and an origin that arrives meanwhile keeps the record. The bound is on
// what L1 holds, not on what it keeps: every receipt, held or not, stays in
// the receipts stream and the completion log, and each one quarantined
// adds a quarantine record (bounded by QuarantineMaxBytes).
// Every refusal is quarantined, counted per reason (Service.Refusals) and
// logged with its reason.
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
// # Class lanes
//
// The receipts of a priority class's events arrive in the class's lane
// (receipt.ClassSubject: the class as a last subject token). With
// ServiceConfig.Classes each lane has a durable consumer of its own on
// Stream (receipt.ClassConsumer, filtered to the lane) and a loop of its
// own, as above, beside Consumer's: a backlog of other receipts does not
// hold a lane's back. Consumer ACKs a lane's receipts without applying
// them, since the lane's consumer holds each until it has applied it; so
// each is applied once. A lane of no configured class (the class removed
// from the topology, or not yet added at L1) is applied by Consumer; a
// lane consumer of a class no longer configured is still consumed, from
// the next start on, so that what it holds is applied. The subject binds
// a receipt in a lane as it binds any other (its site and status, with
// the class token after them).
//
// # Sending an event again to one edge
//
// With ServiceConfig.Address, what L1 publishes again goes to the one edge
// that misses it: the redrive publishes one copy per missing processor,
// and Resend sends a released edge's pending events (its hub released
// them past its backlog budget; package jsplan's Release) on the subject
// Address gives (topology.AddressedSubject). Only that edge's consumer at
// its hub takes such a copy, and its runner hands it to the sink on the
// event's own subject. Every copy carries the event's headers (its
// Nats-Msg-Id, so its event_id) and RedriveHeader; Resend sends an event
// only once it is older than the origin stream's duplicate window
// (OriginDuplicates), which would otherwise drop the copy, publishes in
// atomic batches, and waits for their PubAck.
//
// # Retired sites
//
// Retire closes, for a site retired or removed from the topology, every
// event pending for it: the processor gets record.StatusRetired, with who
// closed it and why, in one log entry per batch, so the log audits it. A
// receipt the site sent before it was retired replaces the retirement
// (record.FoldReceipt). The state of the previous layout cannot retire.
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
//   - The held bound evicts whole records: an event held for two sites,
//     one of them over its bound, loses both sites' held receipts (the
//     other's to quarantine, with the reason). A site can only do that to
//     events L1 has not seen, whose ids it knows.
//   - The held bound quarantines at the pace the quarantine stream stores
//     records (one flush each under SyncAlways): a flood of receipts for
//     unseen events is absorbed at that pace, and the receipts behind it
//     wait in the receipts stream (docs/measurements has the figure).
//     While the quarantine stream is full, nothing past the bound can be
//     quarantined: those receipts stay held, and each round logs why.
//   - The tally of held receipts per site is kept in memory by each
//     instance and counted again from the State every expiry round: what
//     another instance released or removed meanwhile still counts here
//     until then, and can make this one quarantine a site's oldest held
//     events early.
//   - Overdue uses published_at (L1's clock); processed_at comes from the
//     edge's clock and is informational.
//   - Summary counts index entries one after another (no snapshot) and may
//     include entries a crash left until they are repaired; overdue counts
//     and the oldest pending event come from scans bounded by MaxSummaryScan
//     (Truncated says so). List results are always checked against records,
//     but an entry rewritten during paging can appear on two pages.
//   - Summary's streams (ServiceConfig.Streams) may be up to 2 s old: they
//     are read at most that often, whatever the number of callers, and a
//     stream whose info cannot be read in time is left out.
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
package completion
