// Package cleanup deletes origin messages whose events are done, each
// delete audited: L1A then holds the unfinished work instead of
// everything or whatever its limits keep.
//
// # Cleanup
//
// A Cleaner (on in every L1 box unless completion.cleanup.enabled is
// false) deletes origin messages whose events are done, so that L1A holds
// the unfinished work instead of everything or whatever its limits keep.
// A pass reads L1A in sequence order (headers only when the event_id is a
// header) and deletes a message only when all of these hold:
//
//   - the completion record of its event_id knows the origin, and its
//     recorded origin sequence is this message's sequence (or the message
//     is a redrive copy, RedriveHeader set, at a later sequence); any other
//     message is a mismatch: logged once, counted, and never deleted;
//   - every expected processor reported a terminal status: processed,
//     dead_lettered with CleanupConfig.AllowDeadLettered, or expired with
//     CleanupConfig.AllowExpired; an event with a conflict is left to an
//     operator;
//   - the grace period has passed since the last of those receipts and
//     since the message was stored, and this process has not redriven the
//     event within it. The grace period is Grace, or PressureGrace (two
//     seconds) while L1A is at least PressureAt (half) full against its
//     byte or message limit: a stream that fills keeps done events only as
//     long as it must, so that it refuses nothing while the edges keep up.
//
// Commit first: the pass writes the AuditRecord of every message it
// decided to delete (the receipts that justified it, who decided and when)
// to the audit stream, in atomic batches, and waits for their PubAcks;
// then it deletes. The decided messages from L1A's first message up to the
// first one it keeps go in one purge below the last of them, after that
// last one is read back with its event_id and the stream is found to be
// the one the scan read (its creation time): no message below a sequence
// can appear later, so the purge takes only what was read and decided.
// Every other decided message is read back and deleted only if it still
// carries the event_id. Only then are they counted. A crash after the
// records leaves records without deletes; the next pass finds them (each
// subject names the event and the sequence, and every record is published
// expecting its subject empty), writes none again and deletes. Two
// cleaners deciding one message write one record (that expectation) and
// delete it once: the server counts what each purge removed, and a second
// delete finds nothing and is counted as gone. A pass never deletes by a
// sequence it did not read back with the expected event_id.
//
// Caveats: an audit record states a decision; if the stream's own limits
// remove the message first, the record stands for a delete that the limits
// did. The redrive state of another L1 instance is not visible: a copy it
// publishes is a message of its own, cleaned when it is old enough, and the
// event it copies is complete, so deleting the first publication loses
// nothing. The audit stream uses DiscardNew: when it is full, deletes stop.
package cleanup
