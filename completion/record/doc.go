// Package record is L1's completion record of an event — where and when
// it was published, which processors must report, and what each reported —
// the rules that change it (FoldReceipt, FoldOrigin), and the State
// interface through which the completion service records and answers.
//
// # Completion record and status
//
// A Completion holds, per event: the origin stream, subject and the time the
// event was stored there (published_at, from the origin message's stream
// timestamp), the expected processors, and per processor the first terminal
// status with its site, processed_at (edge clock), received_at (L1 clock),
// and the duplicate and conflict counters. Its overall status is derived:
//
//   - dead_lettered: some processor reported dead_lettered;
//   - complete: the origin was seen and every expected processor reported
//     processed (vacuously, when none is expected);
//   - pending: otherwise — including while the origin message has not been
//     seen, because only it says which processors to wait for;
//   - origin_unknown: with origin tracking, only held receipts so far (see
//     "Identity"); it lists and counts as pending.
//
// conflict is set when any conflicting receipt was counted. Overdue is a
// read-time view: a pending event published at least OverdueAfter ago (per
// site: the site has not reported an event published that long ago).
package record
