package box

import (
	"context"
	"time"

	"github.com/leafline/leafline/jsplan"
)

// trimStreams runs trim on the site's streams every jsplan.TrimEvery until ctx
// ends. A failure is logged and retried on the next round: trimming late
// only costs room.
func (a *App) trimStreams(ctx context.Context) {
	plans := jsplan.TrimPlans(a.cfg, a.site)
	tick := time.NewTicker(jsplan.TrimEvery)
	defer tick.Stop()
	failing := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, p := range plans {
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			n, err := jsplan.TrimStream(tctx, a.js, p)
			cancel()
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
