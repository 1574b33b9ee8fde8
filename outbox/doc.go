// Package outbox is leafline's transactional outbox: the durable record of
// every business receipt between "the edge processed an event" and "the
// receipts stream PubAck'ed the receipt", stored in one bbolt file, and the
// Relay that republishes what was left behind.
//
// The package knows nothing about NATS. The edge publishes through a
// Publisher and uses Record.Key as the Nats-Msg-Id.
//
// # Guarantees
//
// Commit first. Commit stores a batch of records, together with whatever
// its callback writes in the same file (the store sink's business record),
// in one bbolt transaction: one fsync, all or nothing. When Commit returns
// nil the records are on disk; when it returns an error none of them is.
//
// A key is stored once. A record is identified by its Key. Committing an
// existing Key again (a redelivered event) stores nothing and returns the
// stored record, pending or published, so the caller republishes the same
// receipt rather than creating a second one.
//
// Pending until MarkPublished. A record stays pending, and is returned by
// Pending, until MarkPublished is called for its Key; the caller does that
// only after the receipts stream PubAck'ed it, and ACKs the source message
// only after MarkPublished returned nil. CommitMark is Commit and
// MarkPublished in one transaction, for a caller that has both to write.
//
// Relay: at least once. Run publishes every record that stays pending
// longer than MinAge, and keeps retrying until the Publisher reports
// success, across restarts. It may publish a record that is already
// published (the runner and the Relay raced, or a crash came between the
// PubAck and MarkPublished); downstream dedupes by Key.
//
// What a crash at each point causes:
//
//   - before or during Commit: nothing is stored; the source message is
//     not ACKed and is redelivered; processing runs again.
//   - after Commit, before the PubAck: the record is pending; the relay
//     publishes it after restart; the redelivered source message finds the
//     existing record (no second record) and is published again too.
//   - after the PubAck, before MarkPublished: the record is pending; it is
//     published again and the stream (within its duplicate window) or the
//     completion service (after it) drops the duplicate.
//   - after MarkPublished, before the ACK: the source message is
//     redelivered and Commit returns the stored record in StatePublished:
//     the caller may ACK at once (or publish again; it is deduped).
//
// In no case is a committed receipt lost.
//
// # Robustness
//
// A new file is created under a temporary name and linked into place only
// when complete. Open validates an existing file before bbolt maps it (meta
// page checksums, truncation, every reachable page, the freelist), recovers
// panics from bbolt, and reports damage as ErrCorrupt naming the file and
// telling the operator to restore it; it never re-initialises a damaged
// file and never returns an empty outbox in place of a damaged one. A meta
// page that fails its checksum is reported too, although bbolt would open
// the file by falling back to the previous transaction: that fallback can
// drop the last commit silently. Check runs bbolt's consistency check and
// the outbox invariants; run it at startup. Records carry a CRC-32C, so a
// damaged record is reported, not published. Every read and write recovers
// bbolt panics and memory faults into ErrCorrupt.
//
// bbolt's fsync is never disabled and only managed transactions are used.
//
// # File layout
//
// Top-level buckets (the edge keeps its own buckets in the same file; names
// starting with "outbox." are reserved):
//
//	outbox.meta       "schema" -> 2, "pending" / "published" -> counters (uint64 big endian)
//	outbox.records    Key -> record (format documented in record.go, with CRC-32C)
//	outbox.pending    big-endian Seq -> Key, for pending records only
//	outbox.published  big-endian PublishedAt (Unix ns) + Seq -> Key, for published records only
//	outbox.marks      big-endian Seq -> PublishedAt (Unix ns), for published records only
//
// Seq comes from NextSequence of outbox.records. A record is written once,
// by Commit, as pending; MarkPublished adds its mark and moves its index
// entry, and never rewrites it: the Seq-keyed writes land on the last
// pages of their trees, where rewriting records under random receipt keys
// dirtied a page per record (schema 1 did that; Open upgrades a schema 1
// file in place by adding the marks bucket, and its records that say
// "published" themselves are read as published). A file whose schema
// version is neither 1 nor SchemaVersion is refused with ErrSchema.
//
// # Memory
//
// bbolt reads the file through a shared, read-only memory map, so every
// page a read touched counts in the process's resident set until the
// kernel needs it back; with random keys that tends to the whole file.
// ReleaseMapped (Linux) unmaps those pages with madvise(MADV_DONTNEED)
// inside a read transaction, which holds bbolt's remap lock. Nothing is
// lost or written: the pages stay in the page cache, and the next read
// maps them again. Check releases what its full read mapped.
//
// # Platforms
//
// Open locks the file before it reads it: with flock on Unix (the lock
// bbolt takes too), and on Windows with LockFileEx on a byte of its own
// next to bbolt's (see lock_windows.go); either way a second process
// waits OpenTimeout and fails. A new file is linked into place and its
// directory fsynced; Windows has no directory fsync and needs none (NTFS
// journals its metadata), and os.Rename, the fallback where hard links are
// not supported, replaces atomically there too (MoveFileEx).
//
// bbolt maps the whole file. Where pointers are 32 bits wide the address
// space is 2 to 3 GiB, so Open bounds the file to MaxSize32 (1 GiB) by
// default: a write past it fails with ErrFull instead of failing to remap
// at an arbitrary point. Pruning keeps the file within it; the pages Prune
// frees are reused, the file never shrinks.
//
// # Caveats
//
// Commit, MarkPublished and Prune errors are fatal. bbolt rolls back a
// failed commit and does not retry it, and after a failed fsync the state
// of the page cache is unknown. The Outbox therefore refuses every later
// write with an error wrapping the first one; the process should stop and
// restart (crash recovery above applies). A Commit callback error is not
// fatal: it rolls back cleanly.
//
// A full file stays full until Prune has published records to delete, and
// Prune itself writes (bbolt copies each page it changes), which works only
// while earlier transactions have left free pages. A file filled by pending
// records, or by buckets that are never pruned (the store sink's), cannot
// be relieved by the outbox.
//
// Prune forgets keys. After a published record is pruned, a very late
// redelivery of its source event commits a second record with the same Key
// and publishes it again; the completion service dedupes it by event_id.
// Prune well behind the redelivery horizon of the source streams.
//
// The Publisher must be idempotent by Key: set Nats-Msg-Id to Record.Key.
// The stream's duplicate window (the edge's receipts stream: 10s by
// default) covers fast republishing only; the completion service's KV
// dedupe covers the rest. A Publisher that fails after storing some
// records names them with a *PartialError: the relay (and the edge's
// runner) mark those at once rather than publish them again later.
//
// The Commit callback runs inside the write transaction and must not call
// methods of the Outbox (that would deadlock bbolt).
//
// Open reads the live part of the file once and Check reads the whole
// file; both grow with the file, so prune regularly.
package outbox
