// Package status answers "what happened to event X?" for L1: an HTTP API
// (NewHTTPHandler), a NATS micro service (StartMicro) and its client
// (StatusClient), all over a record.StatusSource (the completion service,
// or a State), and, in status/console, the L1 console.
//
// # Guarantees
//
//   - Read only: nothing here changes a record.
//   - Every bad request is answered with its reason: 400 (ErrBadQuery),
//     404 (ErrNotFound), 503 while the source is not ready (ErrNotReady).
//   - The client's answers are the server's: StatusClient implements
//     record.StatusSource, so a status command reads what the HTTP API
//     serves.
package status
