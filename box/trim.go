package box

import (
	"context"
	"time"

	"github.com/leafline/leafline/jsplan"
)

// trimStreams runs trim on the site's streams every jsplan.TrimEvery until ctx
// ends. A failure is logged and retried on the next round: trimming late
// only costs room.
//
// The embedded server's store is not trimmed while its filesystem has
// less free space than the box waits for after a full disk
// (resumeFreeBytes): a trim's purge rewrites the stream's first block,
// and a write that fails there deadlocks nats-server's store (v2.15.3:
// the compaction rebuilds the store's state under the lock it holds), so
// that the box could never stop or resume. Below that, the box is about
// to stop for a full disk anyway.
func (a *App) trimStreams(ctx context.Context) {
	plans := a.plans
	tick := time.NewTicker(jsplan.TrimEvery)
	defer tick.Stop()
	failing := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if a.srv != nil && lowOnSpace(a.cfg.DataDir) {
			continue
		}
		for _, p := range plans {
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			now := time.Now()
			n, backlogs, err := jsplan.TrimStreamAt(tctx, a.js, p, now)
			cancel()
			a.noteBacklogs(p.Stream, backlogs, now)
			if err != nil {
				if !failing[p.Stream] && ctx.Err() == nil {
					a.log.Warn("stream trim failed; retrying", "stream", p.Stream, "err", err)
				}
				failing[p.Stream] = true
				continue
			}
			failing[p.Stream] = false
			a.metrics.trimmed.WithLabelValues(p.Stream).Add(float64(n))
		}
	}
}
