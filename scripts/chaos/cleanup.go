//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/receipts"
)

// cleanupL1Config is L1's completion.cleanup under --cleanup: a short grace
// and interval, so that the run deletes while its faults happen.
func cleanupL1Config() map[string]any {
	return map[string]any{"enabled": true, "grace": "5s", "interval": "2s"}
}

// cleanupVerdict is what the checker found about L1A's cleanup.
type cleanupVerdict struct {
	deleted    uint64 // L1A messages gone (L1A drops nothing by itself: DiscardNew)
	audited    int    // audit records
	unaudited  int    // deleted messages without an audit record
	incomplete int    // audit records of events the completion records show not done
	pending    int    // audit records whose message is still in L1A (finished by the next pass)
	examples   []string
}

func (v cleanupVerdict) violation() bool { return v.unaudited > 0 || v.incomplete > 0 }

// checkCleanup checks that every message missing from L1A has an audit
// record, and every audit record an event that every edge reported.
func checkCleanup(ctx context.Context, js jetstream.JetStream, origin string, obs *observer) (cleanupVerdict, error) {
	var v cleanupVerdict
	st, err := js.Stream(ctx, origin)
	if err != nil {
		return v, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return v, err
	}
	v.deleted = info.State.LastSeq - info.State.Msgs
	oc, err := js.OrderedConsumer(ctx, receipts.DefaultAuditStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return v, fmt.Errorf("audit stream: %w", err)
	}
	for {
		batch, err := oc.FetchNoWait(256)
		if err != nil {
			return v, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var r receipts.AuditRecord
			if err := json.Unmarshal(m.Data(), &r); err != nil {
				return v, fmt.Errorf("audit record %s: %w", m.Subject(), err)
			}
			v.audited++
			if _, err := st.GetMsg(ctx, r.Seq); err == nil {
				v.pending++
			}
			if num, ok := eventNum(r.EventID); !ok || !obs.complete(num) {
				v.incomplete++
				if len(v.examples) < 10 {
					v.examples = append(v.examples, fmt.Sprintf("%s (L1A seq %d): cleaned, but its completion record is not done", r.EventID, r.Seq))
				}
			}
		}
		if err := batch.Error(); err != nil {
			return v, err
		}
		if n == 0 {
			break
		}
	}
	if gone := int(v.deleted) - (v.audited - v.pending); gone > 0 {
		v.unaudited = gone
		v.examples = append(v.examples, fmt.Sprintf("%d L1A messages deleted without an audit record", gone))
	}
	return v, nil
}

// complete reports whether every edge reported event n.
func (o *observer) complete(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ob := o.ev[n]
	return ob != nil && ob.mask == o.all
}
