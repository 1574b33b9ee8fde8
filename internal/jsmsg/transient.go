package jsmsg

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Transient reports whether a JetStream call failed in a way that passes
// once the servers have a leader again: no server answered (no
// responders: a cluster electing a stream's leader, a node restarting),
// the answer did not come in time, or the servers answered "not now".
// The same error comes back forever for a subject no stream takes, so a
// caller bounds its retries.
func Transient(err error) bool {
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		// 503 also answers what will not pass by itself, such as a full
		// stream: only these say "not now".
		switch ae.ErrorCode {
		case 10008, // JetStream system temporarily unavailable
			10004, // incomplete results
			10163: // expected last sequence per subject temporarily unavailable
			return true
		}
		return false
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// Full reports whether a stream refused a message because it is at its
// limits and discards new messages (DiscardNew): maximum bytes, messages
// or messages per subject exceeded. Room comes back when messages leave
// it (L1's cleanup deletes the events that are done), so a publisher may
// wait for it; a stream whose messages never leave stays full.
func Full(err error) bool {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) || ae.ErrorCode != streamStoreFailed {
		return false
	}
	d := ae.Description
	return strings.Contains(d, "maximum bytes exceeded") || strings.Contains(d, "maximum messages exceeded") ||
		strings.Contains(d, "maximum messages per subject exceeded")
}

// streamStoreFailed is the server's JSStreamStoreFailedF: a store that
// failed, a full stream's refusal among them.
const streamStoreFailed jetstream.ErrorCode = 10077
