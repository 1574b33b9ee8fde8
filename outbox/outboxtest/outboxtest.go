// Package outboxtest holds test doubles around the outbox.
package outboxtest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/leafline/leafline/outbox"
)

// FailingPublisher fails its first Fails calls, then delegates to Next.
// Calls counts every call.
type FailingPublisher struct {
	Next         outbox.Publisher
	Fails, Calls atomic.Int64
}

// Publish implements outbox.Publisher.
func (f *FailingPublisher) Publish(ctx context.Context, recs []outbox.Record) error {
	f.Calls.Add(1)
	if f.Fails.Add(-1) >= 0 {
		return errors.New("injected: receipts stream unavailable")
	}
	return f.Next.Publish(ctx, recs)
}
