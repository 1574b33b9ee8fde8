// Package cleanup deletes origin messages whose events are done, each
// delete audited: L1A then holds the unfinished work instead of
// everything or whatever its limits keep.
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
//   - every expected processor reported a terminal status: processed,
//     dead_lettered with CleanupConfig.AllowDeadLettered, or expired with
//     CleanupConfig.AllowExpired; an event with a conflict is left to an
//     operator;
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
package cleanup
