//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/check"
)

// cleanupL1Config is L1's completion.cleanup under --cleanup: a short grace
// and interval, so that the run deletes while its faults happen.
func cleanupL1Config() map[string]any {
	return map[string]any{"enabled": true, "grace": "5s", "interval": "2s"}
}

// cleanupVerdict is what the checker found about L1A's cleanup.
type cleanupVerdict struct {
	deleted    int // L1A messages gone (L1A drops nothing by itself: DiscardNew)
	audited    int // audit records
	unaudited  int // deleted messages without an audit record
	incomplete int // audit records of events the completion records show not done
	pending    int // audit records whose message is still in L1A (finished by the next pass)
	examples   []string
}

func (v cleanupVerdict) violation() bool { return v.unaudited > 0 || v.incomplete > 0 }

// checkCleanup checks that every message gone from L1A has an audit
// record, and every audit record an event that every edge reported. L1 may
// still be cleaning: the messages gone are listed first, and since each
// record is written before its delete, every one of them has its record in
// the audit stream read after.
func checkCleanup(ctx context.Context, js jetstream.JetStream, origin string, obs *check.Observer) (cleanupVerdict, error) {
	var v cleanupVerdict
	present := map[uint64]bool{}
	last, err := check.ReadStream(ctx, js, origin, true, func(m jetstream.Msg, seq uint64) error {
		present[seq] = true
		return nil
	})
	if err != nil {
		return v, err
	}
	audited := map[uint64]bool{}
	_, err = check.ReadStream(ctx, js, cleanup.DefaultAuditStream, false, func(m jetstream.Msg, _ uint64) error {
		var r cleanup.AuditRecord
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			return fmt.Errorf("audit record %s: %w", m.Subject(), err)
		}
		v.audited++
		audited[r.Seq] = true
		if present[r.Seq] {
			v.pending++
		}
		if num, ok := check.EventNum(r.EventID); !ok || !obs.Complete(num) {
			v.incomplete++
			if len(v.examples) < 10 {
				v.examples = append(v.examples, fmt.Sprintf("%s (L1A seq %d): cleaned, but its completion record is not done", r.EventID, r.Seq))
			}
		}
		return nil
	})
	if err != nil {
		return v, err
	}
	for seq := uint64(1); seq <= last; seq++ {
		if present[seq] {
			continue
		}
		v.deleted++
		if !audited[seq] {
			v.unaudited++
			if len(v.examples) < 10 {
				v.examples = append(v.examples, fmt.Sprintf("L1A seq %d: deleted without an audit record", seq))
			}
		}
	}
	return v, nil
}
