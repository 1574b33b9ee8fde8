// Package edge is the edge role of a leafline box (see package box): the
// field box that processes the events of its site, even while its link is
// down, and sends a durable receipt for each back towards L1. It holds the
// outbox, the sink runner (package edge/runner) with its consumer, sink and
// receipt publishers, the outbox relay and, in direct delivery mode, the
// consumer on L1's origin stream.
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
// the event id's first bytes in an order-keeping encoding (see package
// receipt, "Message id"), and the store sink keeps each event
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
// edge's own inbox prefix (linkperm.Direct), which only the
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
