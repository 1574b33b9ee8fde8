// Package sink is where an edge box hands each event to the software that
// does the work: a local service over HTTP, a worker process, a PostgreSQL
// database, a NATS service, or the box's own bbolt file.
//
// # The contract
//
// A Sink's Write returns one result per event. nil means the target has
// durably done the work; an error wrapped with Permanent means the target
// refused the event for good (the runner dead-letters it and reports it to
// L1 as dead_lettered); any other error is temporary (the runner NAKs the
// message with backoff, after the delay RetryAfter carries when the target
// asked for one). Every sink here follows the same rules:
//
//   - Success is durable before Write returns, so the receipt that follows
//     never speaks for work that a crash can undo.
//   - Only the target's explicit refusal is permanent (an HTTP 400, 404,
//     413 or 422, a "fail" result, a constraint or type error). A timeout,
//     a refused connection, a malformed or oversize answer, a cancelled
//     context are temporary: nothing tells what the target did, and a
//     retry loses nothing.
//   - Every event reaches the target with its event_id. The runner may hand
//     an event to the target again (after a crash, a lost ACK, a temporary
//     failure of another event in the same request), and a batch may hold
//     the same event_id twice: the target absorbs a repeat by event_id.
//   - Nothing is logged of a payload, a DSN or a header value.
//
// The http, exec and nats sinks send an event_id that appears more than
// once in a batch once, with the event at its first position, and give
// every position that one result. Their Close returns only once no Write
// is in flight, and a Write after Close fails temporarily, wrapping
// net.ErrClosed: http and nats cancel the requests in flight; exec first
// gives its worker ExecCloseGrace to answer and exit.
//
// # Poison events
//
// An event that crashes the target whenever it gets it must not hold the
// others back. The exec and http sinks count, per event_id, the crashes
// of their target the event was in flight at (an exec worker that exited;
// an http target that reset or closed the connection of the event's
// request), send suspects alone so that a crash points at one event, and
// fail an event that was in flight at poison_after crashes in a row
// (default 3) permanently with ErrWorkerCrash: the runner dead-letters it
// as worker_crash, by the dead-letter rule (DLQ record PubAck'ed, then the
// dead_lettered receipt, then ACK). A crash counts only while the target
// answers other events in between, so a target that is down or crashes on
// everything sends no event to the DLQ. The counts live in memory: a box
// restart starts them again, which may cost an event more crashes, never
// fewer. Counters (in Deps) count the crashes and worker restarts.
//
// # Built-in sinks
//
//	store     the event in the box's bbolt file, in the receipt's transaction (TxSink)
//	file      one fsynced file per event under a directory
//	http      POST to a URL: one request per batch, or per event
//	exec      a supervised worker process speaking JSON lines
//	postgres  one transaction per batch, INSERT … ON CONFLICT DO NOTHING
//	nats      a request per event to a service on the box's own NATS server
//
// Open builds the one a box config names (topology.SinkConfig); a Go
// program passes its own with edge.WithSink or edge.WithTxSink (to
// leafline.New).
//
// The wire form of an event (http, exec) is EncodeEvent's JSON object, and
// a target answers with Result objects.
//
// # Conformance
//
// Package sinktest holds the cases every sink passes, against a real
// target: redelivery, mixed results, temporary failure then success, the
// target down and back, a slow target, malformed and oversize answers; and,
// with a whole system, dead-lettering, an outage with nothing ACKed, a
// crash between the target's commit and the ACK, and heartbeats for a slow
// write.
package sink
