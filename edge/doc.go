// Package edge is the leafline appliance: one App per box, whose role (l1,
// hub or edge) comes from the shared topology.
//
// Every box embeds a nats-server with JetStream in its own domain, fsyncing
// every write (SyncAlways) unless the operator explicitly sets
// jetstream.sync_interval, which is logged as a durability warning. Hub and
// edge dial their upstream over a leafnode with IgnoreDiscoveredServers, so
// a box never reconnects around the address it was given.
//
// # Streams
//
// Each box creates the streams it owns on startup and reconciles them on
// restart: it updates in place, and never deletes or recreates a stream. A
// change that would need that (retention, storage, discard policy) is a
// startup error wrapping jsplan.ErrIncompatible. The only messages a box deletes
// are those every taker has (trimming, below).
//
//	forward:  L1A@l1 → HA@hub → L2A@edge           (per-edge subject filter)
//	reverse:  RE@edge → RH@hub → R1@l1              (RE: leafline.receipts.<site>.>)
//
// Each link across a leafnode moves its messages by the link's transport
// (topology.LinkTransport): the relay (package hop, run by the box at each
// end for what it takes; the default between leafline boxes), or durable
// sourcing, where the owner of the source stream creates a durable push
// consumer (AckFlowControl) for each downstream site and the downstream
// stream binds to it by name. A link switched between them starts right
// after what the other stored (switch.go). Every stream is DiscardNew: when
// full, publishes fail and the link waits; nothing old is ever dropped.
//
// Only L1A keeps everything (the origin: L1's tracker and redrive read it),
// and the DLQ (for operators). Every other stream keeps only what is in
// flight, so that a box never stops because its streams filled with what
// the next hop already has. Once a second each box purges, from each
// stream it owns, the messages up to the lowest ACK floor of the durable
// consumers that take them (package jsplan, and trim.go):
//
//   - L2A: the sink runner, which ACKs after its commit and the receipt's
//     PubAck (or after the DLQ record's);
//   - R1: the completion service, which ACKs after its KV write;
//   - RE, RH, HA: the next hop's source consumers (one per sourced edge on
//     HA), whose ACKs are the downstream's flow-control replies, which
//     carry only sequences it has stored. That holds from nats-server
//     2.15.3 (and 2.14.10), which go.mod requires: v2.15.2 could, after a
//     consumer reset, reply with sequences it had skipped, and trimming
//     then deleted them (jsplan.ServerVersionWarning names such a stock server).
//
// A consumer has taken everything up to its ACK floor and, if filtered,
// up to the next message of its subjects in the stream. Nothing else of
// what nats-server reports about a consumer is trusted: it counts a stored
// message as pending only after the PubAck, and its unACKed count (from
// memory) and delivered sequence (from the consumer's store) can disagree
// (0 unACKed, ACK floor 0, delivered 2543 was seen on RE right after a
// link came back). A consumer that does not exist holds the whole
// stream. A consumer that an operator adds to one of these streams is not
// waited for. The streams keep limits retention: a purge by sequence drops
// whole blocks, where work-queue retention deletes one message per ACK
// (measured: it halved the runner's rate under a backlog).
//
// # The edge's guarantee: commit first, ACK last
//
// For each fetched batch the sink runner writes the events through the sink
// (idempotent by event_id), commits every receipt — and for the store sink
// the events themselves — in one bbolt transaction, publishes the new
// receipts to the local receipts stream as one atomic batch, waits for the
// PubAck, marks them published, and only then ACKs the source messages.
// (The mark rides in the next batch's commit transaction when one is
// waiting; the ACK still follows it.) Therefore:
//
//   - an ACKed message always has a durable receipt in the receipts stream;
//   - a crash at any point loses nothing: an unACKed message is redelivered,
//     finds its outbox record and is not written twice; a committed receipt
//     left unpublished is republished by the relay;
//   - the receipt's Nats-Msg-Id depends only on (event_id, processor,
//     status), so a republish inside the receipts stream's duplicate window
//     (receipts.duplicate_window, 10s) is dropped by the stream, and one
//     after it is absorbed by L1's completion store;
//   - the streams that only source (HA, L2A, RH, R1) keep no duplicate
//     window: a copy a hop delivers twice is stored twice, and the next
//     consumer absorbs it by key (the outbox by receipt key, L1 by
//     event_id).
//
// A message without a usable event_id is a permanent failure: it is never
// ACKed as processed. A temporary failure is NAKed with backoff. An outbox
// commit error is fatal (ErrFatal): Run returns and the supervisor restarts
// the box; bbolt state is never retried in place.
//
// # Event ids: time-ordered ids append
//
// The outbox keeps each receipt under its Nats-Msg-Id, which starts with
// the event id's first bytes in an order-keeping encoding (see the
// receipts package, "Message id"), and the store sink keeps each event
// under its event_id, both in bbolt B+trees. So the order of event ids
// decides what a batch's transaction costs:
//
//   - time-ordered ids (UUIDv7, ULID, KSUID, sequence numbers) land in a
//     few leaf pages at the end of each tree: few pages to write, few
//     pages mapped;
//   - random ids (UUIDv4, hashes) land on a page each, per tree: about
//     1000 pages written, and 100 MiB or more of the file mapped (the
//     kernel maps 16 pages around each page read) by a transaction of
//     512 events.
//
// Both are correct; only the cost differs, by about twice the drain rate
// and ten times the outbox pages mapped. `leafline publish` and the demo
// mint UUIDv7.
//
// # Direct delivery mode
//
// An edge whose site has delivery_mode "direct" in the topology has no L2A,
// and its hub serves no source on HA for it: the sink runner consumes L1A
// at L1 itself, through both leafnode links, with a durable pull consumer
// named leafline-sink-<site>. L1 creates that consumer (the site's filter,
// explicit ACK, no inactive threshold, the topology's
// sites[].direct_consumer settings), checks it every 5s and puts back
// what a client of its own account changed; the edge only binds to it
// through L1's API prefix, and refuses one it cannot use
// (jsplan.ErrIncompatible). Its ACK is the ACK of the original delivery on L1;
// the receipt path and the commit-first rule are unchanged, and L1 still
// records completion from receipts. The links carry exactly that
// consumer's lookups, pull requests and ACKs, and the replies under the
// edge's own inbox prefix (topology.DirectPermissions), which only the
// consumer's connection uses: an edge cannot create, change or delete its
// consumer, so it cannot lose the record of what it has ACKed.
//
// The trade-off: a sourced edge goes on processing its own copy while a
// link is down; a direct-mode edge processes nothing until both its link
// and the hub's link to L1 are up. The events wait on L1; the runner makes
// one attempt per second, logs the outage when it starts (and every minute
// while it lasts, never per fetch), reports it in DirectStatus, and resumes
// by itself. A box that starts while L1 is unreachable, or before L1 has
// created its consumer, waits up to 5s, then runs and binds to the
// consumer when L1 has it. Every fetch and ACK
// crosses two links: AckWait must cover the batch plus the round trip, and
// each fetch that ends on delivery.batch_timeout_ms is a pull request over
// both links. In exchange, L1's consumer state shows what each edge has
// ACKed, and the edge keeps no copy of the events (the hub keeps HA, which
// its sourced edges use).
// Switching modes deletes nothing: an L2A or a consumer on L1A left by the
// other mode stays until an operator removes it, and a new consumer starts
// at the beginning of its stream: events already processed come again and
// are absorbed by event_id (the outbox, L1's completion store).
//
// # Redrive: the end-to-end repair
//
// A hop that skips a message (nats-server durable sourcing was seen to do
// so after an L1 restart during a long cut) would lose an event or a
// receipt silently. L1 sees it:
// the event stays pending for that edge while the edge reports later
// events. L1 then publishes the event again on the origin stream
// (completion/redrive.go, completion.redrive_after). An edge that gets such
// a copy (header Leafline-Redrive) processes it idempotently and publishes
// its receipt again even when its outbox has it published — the receipt
// may be what was lost. Duplicates are absorbed at L1.
//
// # A full disk
//
// A full disk stops the box without losing anything (storage.go), on every
// role and with either link transport. When a watched filesystem (the data
// dir's, the file sink's) has less than 1% free (4 to 128 MiB), the embedded
// server fails a store write for lack of space, the write probe or a bbolt
// commit gets ENOSPC, or the server disables JetStream, Run stops the
// runner, the relays, the completion service, the server and the outbox —
// the state of a clean stop, so nothing is ACKed that is not durable — and
// keeps /healthz, /metrics (leafline_storage_full 1,
// leafline_storage_writable 0) and /readyz (503, a reason naming the
// directory) serving. It logs one "STORAGE FULL" error and starts again, on
// the same data dir, once every watched filesystem has room (2%, between 8
// and 256 MiB). The unACKed events are redelivered then, and each hop's
// dedupe absorbs what comes twice.
//
// A disk too small for the streams' byte limits is not a full disk: the
// box cannot create its streams, whose max_bytes nats-server reserves up
// front (storage_limits.go). The start fails with an error wrapping
// ErrStorageLimits that gives the free space found, what the limits add
// up to and the setting to lower, with a value that fits; CheckStorage
// (leafline check) says the same before the start.
//
// # Caveats
//
//   - Delivery is at least once. A sink must be idempotent by event_id; the
//     built-in file and store sinks are.
//   - A receipt at the edge only says the work is done locally. L1 learns it
//     when the receipt has been sourced through the hub and applied by the
//     completion service; nothing on L1's origin stream is ACKed or deleted
//     by a receipt.
//   - Stream sequences differ at every hop and are never used as identity.
package edge
