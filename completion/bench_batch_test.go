//go:build linux

package completion_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
)

var benchBatchN = flag.Int("receipts.batch-n", 5000, "BenchmarkApplyBatched: receipts per row")

// BenchmarkApplyBatched runs, in one process and under SyncAlways, the
// same workload through the per-receipt path (ApplyBatch 1, InFlight lanes)
// and the batched path (default ApplyBatch): n events are first tracked
// from L1A (origin-events/s, origin-flush/ev), then their n receipts are
// applied, each completing a pending event. Per row it reports receipts/s, the messages stored in
// the completion and index buckets' streams per receipt (stores/rcpt; the
// index purges that follow are one per event in both rows), and the cache
// flushes the disk under the temp dir completed per receipt (flush/rcpt,
// -1 where the kernel does not count them; the count is the whole disk's).
//
//	go test ./completion/ -run '^$' -bench ApplyBatched -benchtime=1x
func BenchmarkApplyBatched(b *testing.B) {
	b.Run("per-receipt", func(b *testing.B) { benchApplyMode(b, *benchBatchN, 1) })
	b.Run("batched", func(b *testing.B) { benchApplyMode(b, *benchBatchN, completion.DefaultApplyBatch) })
}

func benchApplyMode(b *testing.B, n, applyBatch int) {
	srv, js := jstest.StartJS(b, jstest.Options{SyncAlways: true})
	completiontest.CreateR1(b, js)
	preloadOrigins(b, js, n)
	preload(b, js, n)
	var dur time.Duration
	var stores, flushes, originFlushes int64
	var originDur time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bucket := fmt.Sprintf("bench_%d", i)
		cfg := completiontest.Config(jstest.Connect(b, srv))
		cfg.Stream, cfg.Consumer, cfg.Bucket = "RX", fmt.Sprintf("bench-rx-%d", i), bucket
		cfg.OriginStream, cfg.OriginConsumer, cfg.Expected = "L1A", fmt.Sprintf("bench-origin-%d", i), completiontest.Expected
		cfg.ApplyBatch = applyBatch
		tracker, err := completion.NewService(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := tracker.Setup(jstest.Ctx(b)); err != nil {
			b.Fatal(err)
		}
		of0, ostart := diskFlushes(), time.Now()
		stop := completiontest.Run(b, tracker)
		check.For(b, 5*time.Minute, time.Millisecond, func() error {
			if got, want := tracker.Stats().OriginTracked, uint64(n); got < want {
				return fmt.Errorf("%d of %d", got, want)
			}
			return nil
		})
		originDur += time.Since(ostart)
		originFlushes = addFlushes(originFlushes, of0, diskFlushes())
		stop()

		cfg = completiontest.Config(jstest.Connect(b, srv))
		cfg.Consumer, cfg.Bucket, cfg.ApplyBatch = fmt.Sprintf("bench-%d", i), bucket, applyBatch
		svc, err := completion.NewService(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := svc.Setup(jstest.Ctx(b)); err != nil {
			b.Fatal(err)
		}
		before, f0 := bucketStores(b, js, bucket), diskFlushes()
		b.StartTimer()
		start := time.Now()
		stop = completiontest.Run(b, svc)
		check.For(b, 5*time.Minute, time.Millisecond, func() error {
			if got, want := svc.Stats().Applied, uint64(n); got < want {
				return fmt.Errorf("%d of %d", got, want)
			}
			return nil
		})
		dur += time.Since(start)
		b.StopTimer()
		f1 := diskFlushes()
		// The window, for counting this process's fsyncs from outside
		// (strace -f -ttt -e trace=fsync,fdatasync).
		b.Logf("apply window %d.%09d %d.%09d", start.Unix(), start.Nanosecond(), time.Now().Unix(), time.Now().Nanosecond())
		stop()
		stores += bucketStores(b, js, bucket) - before
		flushes = addFlushes(flushes, f0, f1)
		if sum, err := svc.Summary(jstest.Ctx(b)); err != nil || sum.Pending != 0 || sum.Complete != int64(n) {
			b.Fatalf("summary %+v %v", sum, err)
		}
	}
	total := float64(n * b.N)
	b.ReportMetric(total/dur.Seconds(), "receipts/s")
	b.ReportMetric(float64(stores)/total, "stores/rcpt")
	b.ReportMetric(perUnit(flushes, total), "flush/rcpt")
	b.ReportMetric(total/originDur.Seconds(), "origin-events/s")
	b.ReportMetric(perUnit(originFlushes, total), "origin-flush/ev")
	b.ReportMetric(0, "ns/op")
}

// addFlushes adds the flushes between two diskFlushes readings to sum;
// -1 stays -1 (not counted).
func addFlushes(sum, before, after int64) int64 {
	if sum < 0 || before < 0 || after < 0 {
		return -1
	}
	return sum + after - before
}

func perUnit(count int64, units float64) float64 {
	if count < 0 {
		return -1
	}
	return float64(count) / units
}

// bucketStores is how many messages the completion and index buckets'
// streams have stored so far (their last sequences; purged ones included).
func bucketStores(b *testing.B, js jetstream.JetStream, bucket string) int64 {
	b.Helper()
	var n int64
	for _, name := range []string{kvstore.StreamPrefix + bucket, kvstore.StreamPrefix + bucket + kvstore.IndexBucketSuffix} {
		st, err := js.Stream(jstest.Ctx(b), name)
		if err != nil {
			b.Fatal(err)
		}
		n += int64(st.CachedInfo().State.LastSeq)
	}
	return n
}

// diskFlushes is the number of cache flushes completed by the disk that
// holds the temp dir (/proc/diskstats, field "flush requests completed"),
// or -1 where the kernel does not count them (tmpfs, overlay, old kernels).
func diskFlushes() int64 {
	var st unix.Stat_t
	if unix.Stat(os.TempDir(), &st) != nil {
		return -1
	}
	dev, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return -1
	}
	if _, err := os.Stat(filepath.Join(dev, "partition")); err == nil {
		dev = filepath.Dir(dev)
	}
	raw, err := os.ReadFile(filepath.Join(dev, "stat"))
	if err != nil {
		return -1
	}
	// /sys/block/<dev>/stat: 11 I/O fields, 4 discard fields, then flushes.
	f := strings.Fields(string(raw))
	if len(f) < 16 {
		return -1
	}
	v, err := strconv.ParseInt(f[15], 10, 64)
	if err != nil {
		return -1
	}
	return v
}
