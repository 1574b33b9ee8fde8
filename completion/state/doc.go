// Package state is the completion state of an L1 box: what L1 knows
// about every event — pending, complete, dead-lettered, in conflict — kept
// so that recording a batch of receipts and origins costs one write, and a
// question costs what its answer holds.
//
// # Layout
//
// Two parts, one the truth and one derived from it:
//
//   - the log: a JetStream stream (DefaultLogStream, file storage, no
//     limits, Replicas like the box's other streams) of entries. An entry
//     holds the records a group of decisions produced, in full (each as
//     package record encodes a record), and the event_ids whose records
//     it removed. Entries are appended with an expected last sequence
//     (Nats-Expected-Last-Sequence), so each entry was decided against the
//     whole log before it, by whichever box appended it.
//   - the local file (Config.Path, bbolt): the fold of the log. It holds
//     the latest record of each event, an index of the facts List reads
//     (pending, dead-lettered, conflict; of the event and per processor),
//     kept in order of publish time, and the counts Summary reads. The
//     records, the index, the counts and the checkpoint (the last log
//     sequence folded) change in one transaction, so the file is always the
//     fold of a prefix of the log, never half of an entry.
//
// # Guarantees
//
//   - Commit first: ApplyBatch and ApplyOriginBatch return an Outcome only
//     after the entry holding it was stored in the log (its PubAck) and
//     folded into the file. The Service ACKs a receipt or an origin message
//     only then. A crash after the append and before the ACK leaves the
//     entry in the log; the redelivered message is decided against it and
//     counts as a duplicate, as with the KV store.
//   - Same decisions: every outcome is record's FoldReceipt or FoldOrigin
//     applied to the record as the whole log before it left it, in the
//     order the inputs were given. TestDifferential_SameAnswersAsKVStore
//     feeds one history to this State and to Store, two instances
//     of each, and compares every answer.
//   - Several boxes: any number of States may share one log (l1 boxes on
//     one JetStream cluster). Each folds every entry, its own when it
//     appends them and the others' as it follows the log, so each answers
//     Get, List and Summary as the others do once it has folded as far. An
//     append that another box got in before is refused by the server; the
//     box folds the new entries and decides again (Stats.Conflicts).
//   - Never a partial state: Open returns at once, and until the file has
//     folded the log as far as the log reached when Open began, every call
//     answers ErrNotReady and Ready is false (the L1 box's /readyz
//     is then 503). A missing file, a file that is not a state file (moved
//     aside, Path + ".corrupt-<unix time>") and a file folded from a log
//     stream since deleted are rebuilt from the log; Stats.Rebuilt says
//     why, and so does the log.
//   - Upgrade in place: the first box to open a new log imports the KV
//     bucket of the previous layout (Config.ImportBucket), all of it,
//     before any decision; an import cut short is done again by the next
//     box that opens the log. Until it ends, nothing is decided.
//   - Queries cost what they return: Get is one read; a List page reads
//     Limit index entries and Limit records; Summary reads the counts of
//     each site, and only the entries that became overdue since the last
//     fold (the watermark, moved by every fold and once a second when idle).
//
// # Costs
//
// A group of decisions is one log append (one fsync under SyncAlways) and
// one bbolt commit (two fsyncs), whatever its size up to MaxInputs and
// MaxEntryBytes. An event costs its three records in the log (the origin
// and each receipt, fewer when they are decided together) and about a
// kilobyte of local file.
//
// # Caveats
//
//   - The log keeps every entry: it grows with the events L1 has seen (the
//     KV bucket of the previous layout did the same, one record per event).
//     Plan its disk like the origin stream's.
//   - A box whose file is lost folds the whole log again before it is
//     ready: it reads and writes every record (docs/measurements has the
//     time per million events).
//   - A box that follows another's appends answers what it has folded: a
//     Summary asked of two boxes at the same instant may differ by the
//     entries one has not folded yet. HeldEvents folds first, so that no
//     box expires receipts another box has released.
//   - received_at is the deciding box's clock, as with the KV store.
package state
