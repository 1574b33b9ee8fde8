package l1

import (
	"context"
	"time"
)

// watchUnidentified exports the L1 tracker's durable count of origin
// messages without a usable event_id (completion.Service.UnidentifiedCount),
// read at each scrape. A later call (a new service after a restart)
// replaces the source.
func (m *metrics) watchUnidentified(count func(context.Context) (int64, error)) {
	m.unidentified.Store(&count)
	m.unidentifiedOnce.Do(func() {
		m.GaugeFunc("completion_origin_unidentified", "Origin messages without a usable event_id recorded at L1 (never tracked; listed by `leafline pending --unidentified` and GET /v1/unidentified).", func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n, err := (*m.unidentified.Load())(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		})
	})
}
