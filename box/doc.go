// Package box is what every leafline box runs, whatever its site's role:
// the embedded nats-server, its leafnode links, TLS and auth, the streams
// of the site's plan, the storage watch, the data dir's lock, the metrics
// registry and the ops endpoint (/metrics, /healthz, /readyz). The role
// (package edge, hub or l1) is a Role that the box calls at each step of
// its start and stop; package leafline picks it from the topology.
//
// Every box embeds a nats-server with JetStream in its own domain, fsyncing
// every write (SyncAlways) unless the operator explicitly sets
// jetstream.sync_interval, which is logged as a durability warning. Hub and
// edge dial their upstream over a leafnode with IgnoreDiscoveredServers, so
// a box never reconnects around the address it was given. A second box of
// any role on the same data dir stops before it starts a server
// (datadir_lock.go).
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
//	                           → L2A_<CLASS>@edge   (one per priority class, by its own link)
//	reverse:  RE@edge → RH@hub → R1@l1              (RE: leafline.receipts.<site>.>)
//	                                                (each priority class's receipts in a lane,
//	                                                 leafline.receipts.<site>.<status>.<class>,
//	                                                 by links and consumers of its own)
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
//   - L2A and each L2A_<CLASS>: the sink runner, which ACKs after its
//     commit and the receipt's PubAck (or after the DLQ record's);
//   - R1: the completion service, which ACKs after its KV write (one
//     consumer per class lane beside it);
//   - RE, RH, HA: the next hop's consumers (one per edge on HA, one per
//     priority class beside each link's own, and on RE and RH also one
//     of a lane whose class the topology no longer names). A relay
//     consumer is ACKed after the downstream's PubAck (package hop); a
//     source consumer's ACKs are the downstream's flow-control replies,
//     which carry only sequences it has stored. That holds from nats-server
//     2.15.3 (and 2.14.10), which go.mod requires: v2.15.2 could, after a
//     consumer reset, reply with sequences it had skipped, and trimming
//     then deleted them (jsplan.ServerVersionWarning names such a stock server).
//
// HA is bounded per edge as well (backlog.go, jsplan.Budget): a hub keeps
// for each edge at most its backlog budget (topology Backlog), and past it
// releases the edge's oldest events, recording how far in its releases
// bucket (release.go) before the purge deletes anything; its link beats
// carry the release to L1, which sends those events again to that edge
// alone. A hub also deletes, at its start and at each reload, the
// consumers on HA of edges that are no longer its own (jsplan.Prune).
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
// # A new config without a restart
//
// Reload (on SIGHUP in `leafline run`) makes a running box take a new
// config, its topology changed: in place, with the server and its links
// up, when the server runs with the same settings; else by starting again
// inside the process (reload.go). A box restored from a copy of its data
// dir, or replaced with a blank one, is found out by its neighbours'
// relay links (package hop), and Backup and Restore make and take such a
// copy of a stopped box (backup.go).
//
// # A full disk
//
// A full disk stops the box without losing anything (storage.go), on every
// role and with either link transport. When a watched filesystem (the data
// dir's, the file sink's) has less than 1% free (4 to 128 MiB), the embedded
// server fails a store write for lack of space, the write probe or a bbolt
// commit gets ENOSPC, or the server disables JetStream, Run stops the
// role (the edge's runner, relay and outbox, L1's completion service), the
// relays and the server —
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
package box
