package cleanup_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt/receipttest"
)

var (
	benchCleanupN   = flag.Int("cleanup.n", 20_000, "BenchmarkCleanup: receipts applied in each half of the run")
	benchSyncAlways = flag.Bool("cleanup.sync-always", false, "BenchmarkCleanup: the server fsyncs every write")
)

// BenchmarkCleanup measures in one run, on an embedded server (with
// -receipts.sync-always: fsync on every write), the completion service's
// rate with and without the cleaner running, and the cleaner's deletes/s.
// The origin tracker first records 2n events of L1A. Then a Service applies
// the receipts of the first n alone (receipts/s alone); then another
// applies the receipts of the other n while the cleaner deletes the first
// n, each after its audit record (receipts/s with-cleanup, deletes/s).
//
//	go test ./cleanup/ -run '^$' -bench Cleanup -benchtime=1x
func BenchmarkCleanup(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		alone, with, deletes := benchCleanupOnce(b, *benchCleanupN)
		b.ReportMetric(alone, "receipts/s-alone")
		b.ReportMetric(with, "receipts/s-with-cleanup")
		b.ReportMetric(with/alone, "ratio")
		b.ReportMetric(deletes, "deletes/s")
		b.ReportMetric(0, "ns/op")
	}
}

func benchCleanupOnce(b *testing.B, n int) (alone, with, deletes float64) {
	srv, js := jstest.StartJS(b, jstest.Options{SyncAlways: *benchSyncAlways})
	ctx, cancelAll := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancelAll()
	completiontest.CreateL1A(b, js, jetstream.LimitsPolicy)
	for _, s := range []string{"RX", "RA", "RB"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: s, Subjects: []string{s + ".>"}, Storage: jetstream.FileStorage}); err != nil {
			b.Fatal(err)
		}
	}
	id := func(i int) string { return fmt.Sprintf("bench-%07d", i) }
	jstest.PublishAll(b, js, 2*n, func(i int) *nats.Msg {
		m := &nats.Msg{Subject: "events.b", Header: nats.Header{}, Data: []byte(`{"k":1}`)}
		m.Header.Set(jetstream.MsgIDHeader, id(i))
		return m
	})
	jstest.PublishAll(b, js, 2*n, func(i int) *nats.Msg {
		r := receipttest.Receipt(id(i))
		m := &nats.Msg{Subject: map[bool]string{true: "RA.x", false: "RB.x"}[i < n], Data: receipttest.Encode(b, r), Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, r.MsgID())
		return m
	})
	cfg := completiontest.Config(jstest.Connect(b, srv))
	cfg.Stream, cfg.OriginStream, cfg.Expected = "RX", "L1A", completiontest.Expected
	tracker, err := completion.NewService(cfg)
	if err != nil {
		b.Fatal(err)
	}
	stop := completiontest.Run(b, tracker)
	check.For(b, 5*time.Minute, time.Millisecond, func() error {
		if got, want := tracker.Stats().OriginTracked, uint64(2*n); got < want {
			return fmt.Errorf("%d of %d", got, want)
		}
		return nil
	})
	stop()

	apply := func(stream string) (*completion.Service, func()) {
		cfg := completiontest.Config(jstest.Connect(b, srv))
		cfg.Stream, cfg.Consumer = stream, "bench-"+stream
		svc, err := completion.NewService(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := svc.Setup(ctx); err != nil {
			b.Fatal(err)
		}
		return svc, completiontest.Run(b, svc)
	}
	b.StartTimer()
	start := time.Now()
	svcA, stopA := apply("RA")
	check.For(b, 5*time.Minute, time.Millisecond, func() error {
		if got, want := svcA.Stats().Applied, uint64(n); got < want {
			return fmt.Errorf("%d of %d", got, want)
		}
		return nil
	})
	alone = float64(n) / time.Since(start).Seconds()
	stopA()

	cl, err := cleanup.NewCleaner(cleanup.CleanupConfig{JS: jstest.Connect(b, srv), Store: svcA.Store(), OriginStream: "L1A", Grace: time.Hour, Logger: completiontest.QuietLog})
	if err != nil {
		b.Fatal(err)
	}
	if err := cl.Setup(ctx); err != nil {
		b.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cleaned := make(chan time.Duration, 1)
	start = time.Now()
	svcB, stopB := apply("RB")
	go func() {
		for cl.Stats().Deleted < uint64(n) && cctx.Err() == nil {
			if _, err := cl.Pass(cctx, false, time.Now().Add(2*time.Hour)); err != nil && cctx.Err() == nil {
				b.Error(err)
				break
			}
		}
		cleaned <- time.Since(start)
	}()
	check.For(b, 5*time.Minute, time.Millisecond, func() error {
		if got, want := svcB.Stats().Applied, uint64(n); got < want {
			return fmt.Errorf("%d of %d", got, want)
		}
		return nil
	})
	with = float64(n) / time.Since(start).Seconds()
	d := <-cleaned
	b.StopTimer()
	stopB()
	// A pass that ends after the second half completed deletes some of it
	// too.
	s := cl.Stats()
	if s.Deleted < uint64(n) || s.Deleted > uint64(2*n) || s.Mismatches != 0 {
		b.Fatalf("cleanup stats %+v", s)
	}
	return alone, with, float64(s.Deleted) / d.Seconds()
}
