package publish

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/jstest"
)

var benchN = flag.Int("publish.n", 5000, "BenchmarkPublish: events per row")

// BenchmarkPublish publishes the same number of events to an origin stream
// under SyncAlways, in one process: one at a time (each waits for its
// PubAck, like leafline publish --batch 1) and in atomic batches of
// DefaultBatch. It reports events/s per row.
//
//	go test ./publish/ -run '^$' -bench Publish -benchtime=1x
func BenchmarkPublish(b *testing.B) {
	b.Run("single", func(b *testing.B) { benchPublish(b, 1) })
	b.Run("batched", func(b *testing.B) { benchPublish(b, DefaultBatch) })
}

func benchPublish(b *testing.B, batch int) {
	_, js := jstest.StartJS(b, jstest.Options{SyncAlways: true})
	createOrigin(b, js, true)
	p := newPublisher(b, js, batch)
	var dur time.Duration
	for i := 0; i < b.N; i++ {
		evs := events(*benchN, fmt.Sprintf("bench-%d", i))
		start := time.Now()
		if batch == 1 {
			for _, ev := range evs { // one round trip and fsync each
				if _, err := p.Publish(context.Background(), []Event{ev}); err != nil {
					b.Fatal(err)
				}
			}
		} else if _, err := p.Publish(context.Background(), evs); err != nil {
			b.Fatal(err)
		}
		dur += time.Since(start)
	}
	b.ReportMetric(float64(*benchN*b.N)/dur.Seconds(), "events/s")
	b.ReportMetric(0, "ns/op")
}
