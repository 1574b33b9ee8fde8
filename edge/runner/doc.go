// Package runner is the edge's sink runner: it takes events from a durable
// JetStream pull consumer, writes them through a sink, records a receipt
// for each in the bbolt outbox, publishes the receipts to the local
// receipts stream and only then acknowledges the source messages.
//
// # Guarantee: commit first, ACK last
//
// A message is ACKed (or, when dead-lettered, terminated) only after its
// business write is durable (or its DLQ record PubAck'ed, or it expired),
// its receipt is committed to the outbox and the receipts stream PubAck'ed
// that receipt. Any failure before that leaves
// the message unacked: it is redelivered, and the redelivery finds its
// receipt and DLQ record already stored. Sinks must therefore be
// idempotent by event_id; the runner may hand them the same event twice.
//
// Per fetched batch the runner:
//
//  1. extracts each message's event_id (a message without one is a
//     permanent failure, see package eventid) and its expiry deadline
//     (receipt.Deadline; an unreadable expiry header is a permanent
//     failure);
//  2. marks expired the events past their deadline, unless an earlier
//     delivery's receipt for the event is in the outbox (that receipt
//     stands), and writes the others through the sink, idempotently by
//     event_id; an expired event is never handed to the sink;
//  3. for each permanent failure, with a DLQ configured: publishes a DLQ
//     record (DLQRecord) and waits for its PubAck;
//  4. commits every receipt — processed, dead_lettered for the
//     dead-lettered events, expired for the expired ones — and, for a
//     TxSink, the business records, to the bbolt outbox in ONE transaction;
//  5. publishes the receipts not yet published to the local receipts stream
//     and waits for every PubAck; marks them published in the outbox;
//  6. only then ACKs the source messages (or, for dead letters with
//     dead_letter.ack_term_after_publish, terminates them), confirmed when
//     delivery.ack_confirmation is enabled.
//
// A bbolt commit error is fatal (ErrFatal): Run returns it and the box
// stops; nothing of the batch is ACKed.
//
// # Pipeline
//
// The steps of consecutive batches overlap in four goroutines, so that
// the fetch of one batch, the outbox fsync of another and the receipts
// stream writes of two more run at the same time:
//
//	fetcher (1) ──▶ committer (2-4; mark, 6) ◀──▶ publishers (5: sign, publish, PubAck)
//	    ▲               │
//	    └── permit ─────┘
//
// The committer does every outbox write, in order: a batch's commit, and
// the marks of the batches the publishers have handed back, each followed by
// that batch's final acknowledgements. The marks ride in the next batch's
// commit transaction when a fetched batch is waiting, else in one of their
// own. The fetcher fetches (and decodes) the next batch only with a permit,
// which the committer grants once per batch, after the batch's plain-sink
// write and DLQ publishes and before its outbox commit: at most one batch
// waits fetched, and nothing is fetched once shutdown began (a batch
// already fetched is finished). At most publishDepth committed batches are
// with the publishers. Every batch is covered by InProgress heartbeats
// (when enabled) from its fetch to its final acknowledgement. Each message
// still passes steps 1-6 in order; only different batches overlap, and a
// crash anywhere leaves at most a few batches unacked, to be redelivered
// like one.
//
// # Priority classes
//
// An edge that takes priority classes (topology Events.Priorities) has a
// consumer per class on the class's own stream (Options.Classes), which
// the hub's relay fills through a link of the class's own, so that a
// class's events overtake a backlog at the hub as well as here. Each
// batch comes from one consumer: the most urgent class with messages,
// asked without waiting, and the normal consumer after them, which waits
// for a message as without classes. While classes have messages, every
// fourth batch (normalShare) asks the normal consumer first: normal work
// keeps at least a quarter of the batches, and all the rest of the
// throughput that the classes leave. Within a consumer, the order is the
// stream's; every guarantee above holds for each message whatever its
// consumer, which is also the one its ACK goes to. The receipt of an
// event of a class the edge takes (Options.ReceiptClasses) goes in the
// class's lane (receipt.ClassSubject), which the hub and L1 take ahead
// of the other receipts.
//
// # Caveats
//
// NOTE: a batch may wait for the batches ahead of it (a commit, up to
// publishDepth receipt publishes bounded by outbox.publish_timeout) before
// it is ACKed, and its mark and ACKs wait for the committer to finish what
// it is doing: with a slow plain sink, the next batch's sink write. Size
// AckWait for that, or enable InProgress.
//
// Temporary sink failures are retried in place up to
// delivery.retry.max_retries times, then NAKed with backoff (Backoff) or
// left for AckWait. A sink's own retry delay is honoured up to
// maxRetryAfter.
package runner
