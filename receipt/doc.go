// Package receipt is leafline's business receipt on the wire: a
// processor's durable statement "I reached a terminal status for event X",
// its codec, its message ids, bundles of receipts, and signatures. It is
// all an edge needs of receipts, and it imports nothing of this module.
//
// Receipts are the return path of the event flow: an edge that processed
// (or dead-lettered) an event publishes its receipt to its local receipts
// stream and only then ACKs the event; the receipts travel edge → hub → L1,
// where L1's completion service (package completion) records them.
//
// # Receipt format (version 1)
//
// A receipt is one JSON object, at most MaxEncodedSize bytes:
//
//	{"v":1,
//	 "receipt_id":"01890a5d-ac96-774b-bcce-b302099a8057",
//	 "event_id":"evt-123",
//	 "origin_stream":"L1A",
//	 "processor":"edge-7",
//	 "site":"edge-7",
//	 "status":"processed",
//	 "processed_at":"2026-01-02T03:04:05.123456789Z",
//	 "reason":"...",                       // optional
//	 "payload_sha256":"9f86d0…"}            // optional
//
// status is "processed", "dead_lettered" or "expired" (the event was older
// than its expiry when the processor reached it and was never handed to
// the sink; see Deadline); reason is a short, safe text for dead-lettered
// and expired events (never the payload); payload_sha256 is PayloadDigest
// of the payload the processor received (see Receipt.PayloadSHA256). See
// Receipt.Validate for every rule. Decode is strict: unknown or duplicate
// keys, wrong types, null, missing fields and trailing data are errors
// wrapping ErrMalformed, so a receipt written by a newer, incompatible
// producer is quarantined rather than half-understood. A change that alters
// the meaning of a field bumps "v" (SchemaVersion); a decoder only accepts
// the versions it knows. An optional field is added without a bump, and a
// decoder that predates it quarantines the receipts that carry it: upgrade
// L1 before its edges (a quarantined receipt's event stays pending, and
// L1's redrive has it receipted again once L1 understands it).
// The same holds for a status value: "expired" is accepted by version 1
// decoders of this release; an older L1 refuses it in Validate ("status:
// must be …") and quarantines the receipt with that reason.
//
// # Message id
//
// Receipts are published with Nats-Msg-Id = Receipt.MsgID():
//
//	"rcpt-" + ordered64(event_id[:24]) + "." + ordered64(sha256(event_id + "\x00" + processor + "\x00" + status))
//
// ordered64 is unpadded base64 over an alphabet in ASCII order; an id is
// at most 5+32+1+43 = 81 bytes. The hash names the assertion. The prefix,
// the event id's first 24 bytes, only makes ids sort as the event ids do:
// the edge's outbox appends the receipts of time-ordered ids instead of
// scattering them over its B+tree. Releases before this one used
// "rcpt-" + hex(sha256(…)) alone: across an upgrade, a receipt that both
// releases publish (an event redelivered after it) gets two ids, so
// neither the edge's outbox nor the receipts stream's duplicate window
// sees the repeat, and L1 counts it as a duplicate. Nothing is lost or
// applied twice.
//
// The id names the assertion, not the message. It leaves out receipt_id and
// processed_at because a processor that re-processes a redelivered event
// (or whose outbox relay republishes after a crash) creates a new receipt
// for the same assertion, and the two must collide. It leaves out stream
// sequences because they differ at every hop (edge, RH, R1) and after
// re-sourcing; only business identity survives the chain. It keeps status so
// that a dead_lettered receipt is not swallowed by an earlier processed one
// (or the reverse): the completion service must see the conflict to count it.
//
// # Bundles
//
// An edge publishes the receipts of one batch that it publishes for the
// first time as bundles (bundle.go): one message of up to
// MaxBundleReceipts receipts and MaxBundleBytes on
// "<prefix>.<site>.bundle", the receipts exactly as Encode wrote them
// joined by newlines, BundleHeader giving their count, Nats-Msg-Id
// BundleMsgID of theirs, and one signature over the whole body. The
// receipt path then stores, moves and acknowledges one message per bundle
// at every hop, with either link transport. A receipt that may have been
// published before (a redelivered event's, a republish by the outbox
// relay) goes alone, under its own Nats-Msg-Id, so that a copy inside a
// receipts stream's duplicate window is dropped there; the repeat of a
// receipt first published in a bundle whose PubAck was lost is stored
// again, and L1 counts it as a duplicate. A Service reads both kinds:
// upgrade L1 before its edges.
//
// # Class lanes
//
// The receipt of an event of a priority class travels in the class's
// lane, ahead of the receipts of other events at every hop: its subject
// (or its bundle's) carries the class as a last token,
// "<prefix>.<site>.<status>.<class>" (class.go, ClassSubject). A bundle
// holds one lane's receipts. The token is outside the receipt: it is in
// no field, message id or signature, and L1 binds the subject to the
// receipt's site and status as without it.
//
// # Signatures
//
// An edge with a signing key signs its receipts (SignatureHeader); L1
// verifies them against the site's public key (ServiceConfig.Verify) and
// quarantines any that is unsigned, forged or altered. A receipt is signed
// on its own, or as one of a group of up to 16 of an atomic batch: the
// signature then covers the root of a SHA-256 tree of the group's
// receipts, and the receipt carries its path to the root (ProofHeader).
// Either way each receipt verifies alone, with nothing but its own bytes
// and headers; no change to a receipt, its proof or its count verifies
// (short of a SHA-256 second preimage). A Verifier checks both kinds and
// verifies each group's signature once. A bundle is signed once, over
// bundleDomain ‖ body, and verified whole (Verifier.VerifyMsg): its
// receipts carry no signature of their own.
package receipt
