// Package publish writes events to leafline's origin stream at L1 in
// atomic batches: one disk flush per batch under SyncAlways instead of one
// per event.
//
// # Guarantees
//
//   - Every event carries its event_id as Nats-Msg-Id and is stored only
//     by the named origin stream (Nats-Expected-Stream).
//   - Publish returns nil only when every event was PubAck'ed: stored, or
//     recognised by the stream as a duplicate of an event it already holds
//     (Result.Duplicate). A PubAck'ed event is never reported as not stored.
//   - A batch is committed whole or not at all. A batch whose answer was
//     lost is published again as a whole; if it had landed, the stream
//     refuses the repeat because its Nats-Msg-Ids are already stored, and
//     the events are then published one by one, each PubAck'ed as a
//     duplicate. So a retry never stores an event twice within the
//     stream's duplicate window.
//   - A batch that meets a stream without a leader for now (no
//     responders, no answer in time, JetStream unavailable: a node of its
//     cluster down, an election, a server restarting) is sent again, what
//     was not PubAck'ed only, pausing 250 ms to 2 s between attempts, for
//     Config.RetryFor (a minute by default); Publisher.Retries counts
//     those attempts. Nothing is stored twice: the repeats carry the same
//     Nats-Msg-Ids.
//   - A batch that meets a full origin stream (at its byte or message
//     limit, which refuses new events rather than drop old ones) waits
//     for room the same way, for as long: L1's cleanup deletes the events
//     the edges have done, so a publisher faster than its fleet is slowed
//     to the fleet's pace instead of refused. A stream that stays full
//     (the edges parked, the cleanup off) is reported after RetryFor.
//   - On failure the error is a *NotStoredError naming every event that
//     was not PubAck'ed, so that the caller can publish exactly those again.
//
// # Caveats
//
//   - Nats-Msg-Id deduplication lasts only for the origin stream's
//     duplicate window (2 minutes by default). An event published again
//     after it is stored again; L1's origin tracker then keeps the first
//     publication and the edges absorb the repeat by event_id.
//   - The origin stream must allow atomic publish (AllowAtomicPublish);
//     leafline's L1 creates it so. Where it does not, Publish falls back to
//     one publish per event (still with Nats-Msg-Id) and says so in
//     Result.Batched.
//   - Two events with the same event_id in one call are stored once; the
//     second is reported as a duplicate.
//   - A subject that no stream takes answers "no responders" as an
//     election does: it is reported only once RetryFor has passed.
package publish
