package hop_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/leafline/leafline/hop"
	"github.com/leafline/leafline/internal/check"
)

// diskFlushes sums the flush requests completed by the block devices
// (field 17 of /sys/block/*/stat), or -1 where the kernel reports none.
func diskFlushes() int64 {
	var total int64 = -1
	ents, _ := os.ReadDir("/sys/block")
	for _, e := range ents {
		b, err := os.ReadFile("/sys/block/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 17 {
			continue
		}
		n, _ := strconv.ParseInt(f[16], 10, 64)
		total = max(total, 0) + n
	}
	return total
}

// BenchmarkHop moves LEAFLINE_RELAY_BENCH_N messages (default 50000) over
// one real leafnode link, both sites under SyncAlways, by durable sourcing
// and by the relay, and reports msgs/s and disk flushes per message.
//
//	go test ./relay/ -run '^$' -bench Hop -benchtime 1x
func BenchmarkHop(b *testing.B) {
	n := 50000
	if v, err := strconv.Atoi(os.Getenv("LEAFLINE_RELAY_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	for _, transport := range []string{"sourcing", "relay"} {
		b.Run(transport, func(b *testing.B) {
			for range b.N {
				p := startPairOpts(b, time.Minute, true, jetstream.AckAllPolicy)
				preload(b, p, n)
				ctx := context.Background()
				f0, t0 := diskFlushes(), time.Now()
				if transport == "sourcing" {
					if _, err := p.upJS.CreateOrUpdateConsumer(ctx, "UP", jetstream.ConsumerConfig{Durable: "src",
						AckPolicy: jetstream.AckFlowControlPolicy, MaxAckPending: 10000, DeliverSubject: "deliver.src",
						FlowControl: true, IdleHeartbeat: time.Second}); err != nil {
						b.Fatal(err)
					}
					if _, err := p.downJS.CreateStream(ctx, jetstream.StreamConfig{Name: "SRC", Storage: jetstream.FileStorage,
						Sources: []*jetstream.StreamSource{{Name: "UP", External: &jetstream.ExternalStream{APIPrefix: "$JS.up.API"},
							Consumer: &jetstream.StreamConsumerSource{Name: "src", DeliverSubject: "deliver.src"}}}}); err != nil {
						b.Fatal(err)
					}
				} else {
					l := p.link()
					r, err := hop.New(l)
					if err != nil {
						b.Fatal(err)
					}
					p.run(b, r)
				}
				stream := map[string]string{"sourcing": "SRC", "relay": "DOWN"}[transport]
				check.For(b, 10*time.Minute, 50*time.Millisecond, func() error {
					s, err := p.downJS.Stream(ctx, stream)
					if err != nil {
						return err
					}
					if got := s.CachedInfo().State.Msgs; got < uint64(n) {
						return fmt.Errorf("%d of %d moved", got, n)
					}
					return nil
				})
				d, f1 := time.Since(t0), diskFlushes()
				b.ReportMetric(float64(n)/d.Seconds(), "msgs/s")
				if f0 >= 0 {
					b.ReportMetric(float64(f1-f0)/float64(n), "flushes/msg")
				}
			}
		})
	}
}

func preload(b *testing.B, p *pair, n int) {
	var batch []*nats.Msg
	for i := range n {
		m := nats.NewMsg(fmt.Sprintf("ev.%d", i%7))
		m.Data = make([]byte, 200)
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("id-%d", i))
		batch = append(batch, m)
		if len(batch) == 500 || i == n-1 {
			if _, err := jetstreamext.PublishMsgBatch(context.Background(), p.upJS, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}
