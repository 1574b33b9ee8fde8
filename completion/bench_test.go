package completion_test

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt/receipttest"
)

// preload publishes n receipts for distinct events to R1 with async
// publishes and waits for every PubAck.
func preload(b *testing.B, js jetstream.JetStream, n int) {
	b.Helper()
	jstest.PublishAll(b, js, n, func(i int) *nats.Msg {
		r := receipttest.Receipt(fmt.Sprintf("bench-%07d", i))
		m := &nats.Msg{Subject: completiontest.ReceiptsSubject, Data: receipttest.Encode(b, r), Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, r.MsgID())
		return m
	})
}

// rawConsume reads every message of R1 with a new durable consumer and one
// long-lived pull iterator, ACKing each, and returns how long it took.
func rawConsume(b *testing.B, js jetstream.JetStream, name string, n int) time.Duration {
	b.Helper()
	ctx := jstest.Ctx(b)
	cons, err := js.CreateOrUpdateConsumer(ctx, "R1", jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4 * completion.DefaultBatchSize,
	})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	iter, err := cons.Messages(jetstream.PullMaxMessages(completion.DefaultBatchSize))
	if err != nil {
		b.Fatal(err)
	}
	defer iter.Stop()
	for i := 0; i < n; i++ {
		m, err := iter.Next()
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkApply100k applies 100k receipts (distinct events, default
// InFlight and BatchSize, default sync interval) preloaded into R1 on an
// embedded server, and in the same run consumes the same stream raw with
// jetstream (pull iterator, explicit ACK). It reports receipts/s,
// raw-msgs/s and their ratio.
//
//   - receipts-first: no origin records; each receipt creates its event's
//     record (read, pending index entry, create: 3 round trips);
//
//   - origin-first: the origin tracker has first recorded the 100k events
//     from L1A (reported as origin-events/s); each receipt then completes a
//     pending event (read, compare-and-set, two index removals: 4 round trips).
//
//     go test ./completion/ -run '^$' -bench Apply100k -benchtime=1x
//
// -receipts.n sets the count; with -receipts.sync-always the server
// fsyncs every write, as leafline's boxes do; -receipts.lanes sets the
// receipts consumer's InFlight and BatchSize.
func BenchmarkApply100k(b *testing.B) {
	b.Run("receipts-first", func(b *testing.B) { benchApply(b, *benchN, false) })
	b.Run("origin-first", func(b *testing.B) { benchApply(b, *benchN, true) })
}

var (
	benchN          = flag.Int("receipts.n", 100_000, "BenchmarkApply100k: receipts per run")
	benchSyncAlways = flag.Bool("receipts.sync-always", false, "BenchmarkApply100k: the server fsyncs every write")
	benchLanes      = flag.Int("receipts.lanes", 0, "BenchmarkApply100k: ServiceConfig.InFlight and BatchSize (0: the defaults)")
)

func benchApply(b *testing.B, n int, originFirst bool) {
	srv, js := jstest.StartJS(b, jstest.Options{SyncAlways: *benchSyncAlways})
	completiontest.CreateR1(b, js)
	if originFirst {
		preloadOrigins(b, js, n)
	}
	preload(b, js, n)
	var raw, svcDur, originDur time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		raw += rawConsume(b, jstest.Connect(b, srv), fmt.Sprintf("raw-%d", i), n)
		bucket := fmt.Sprintf("bench_%d", i)
		if originFirst { // the tracker alone (its receipts stream RX stays empty)
			cfg := completiontest.Config(jstest.Connect(b, srv))
			cfg.Stream, cfg.Consumer, cfg.Bucket = "RX", fmt.Sprintf("bench-rx-%d", i), bucket
			cfg.OriginStream, cfg.OriginConsumer, cfg.Expected = "L1A", fmt.Sprintf("bench-origin-%d", i), completiontest.Expected
			tracker, err := completion.NewService(cfg)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			stop := completiontest.Run(b, tracker)
			check.For(b, 5*time.Minute, time.Millisecond, func() error {
				if got, want := tracker.Stats().OriginTracked, uint64(n); got < want {
					return fmt.Errorf("%d of %d", got, want)
				}
				return nil
			})
			originDur += time.Since(start)
			stop()
		}
		cfg := completiontest.Config(jstest.Connect(b, srv))
		cfg.Consumer, cfg.Bucket = fmt.Sprintf("bench-%d", i), bucket
		cfg.InFlight, cfg.BatchSize = *benchLanes, *benchLanes
		svc, err := completion.NewService(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := svc.Setup(jstest.Ctx(b)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		stop := completiontest.Run(b, svc)
		check.For(b, 5*time.Minute, time.Millisecond, func() error {
			if got, want := svc.Stats().Applied, uint64(n); got < want {
				return fmt.Errorf("%d of %d", got, want)
			}
			return nil
		})
		svcDur += time.Since(start)
		b.StopTimer()
		stop()
		if st := svc.Stats(); st.Applied != uint64(n) || st.Retried != 0 {
			b.Fatalf("stats %+v", st)
		}
		if originFirst {
			if sum, err := svc.Summary(jstest.Ctx(b)); err != nil || sum.Pending != 0 || sum.Complete != int64(n) {
				b.Fatalf("summary %+v %v", sum, err)
			}
		}
	}
	rate := float64(n*b.N) / svcDur.Seconds()
	rawRate := float64(n*b.N) / raw.Seconds()
	b.ReportMetric(rate, "receipts/s")
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(rate/rawRate, "ratio")
	if originFirst {
		b.ReportMetric(float64(n*b.N)/originDur.Seconds(), "origin-events/s")
	}
	b.ReportMetric(0, "ns/op")
}

// preloadOrigins creates L1A with n events and an empty receipts stream RX
// for a tracker that only follows the origin.
func preloadOrigins(b *testing.B, js jetstream.JetStream, n int) {
	b.Helper()
	completiontest.CreateL1A(b, js, jetstream.LimitsPolicy)
	if _, err := js.CreateStream(jstest.Ctx(b), jetstream.StreamConfig{Name: "RX", Subjects: []string{"unused.receipts"}}); err != nil {
		b.Fatal(err)
	}
	jstest.PublishAll(b, js, n, func(i int) *nats.Msg {
		m := &nats.Msg{Subject: "events.b", Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("bench-%07d", i))
		return m
	})
}
