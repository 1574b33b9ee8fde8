//go:build linux

package completion_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
)

var (
	heldFloodN       = flag.Int("held.flood-n", 100_000, "BenchmarkHeldFlood: forged receipts from one site")
	heldFloodGenuine = flag.Int("held.genuine-n", 1000, "BenchmarkHeldFlood: genuine events (origin and a receipt from another site) sent meanwhile")
	heldFloodBound   = flag.Int("held.bound", 10_000, "BenchmarkHeldFlood: ServiceConfig.HeldMaxPerSite of the bounded row")
)

// BenchmarkHeldFlood measures what a flood of receipts for events L1 has
// never seen, all from one site (a stolen edge forging event ids), costs
// an L1 as the box runs it (SyncAlways, package completion's state),
// with the per-site bound and without it, while another site's genuine
// work goes on. It reports the most receipts and bytes held for the
// flooding site at any time (sampled every 10ms), the process's resident
// memory and the disk of the state file and of each stream before and
// after, and how long the genuine events took. Run it by hand:
//
//	go test -run '^$' -bench HeldFlood -benchtime 1x ./completion/
func BenchmarkHeldFlood(b *testing.B) {
	b.Run(fmt.Sprintf("bound=%d", *heldFloodBound), func(b *testing.B) { benchHeldFlood(b, *heldFloodBound) })
	b.Run("unbounded", func(b *testing.B) { benchHeldFlood(b, -1) })
}

func benchHeldFlood(b *testing.B, bound int) {
	for range b.N {
		dir := b.TempDir()
		jsDir := filepath.Join(dir, "js")
		srv, js := jstest.StartJS(b, jstest.Options{SyncAlways: true, StoreDir: jsDir})
		ctx := jstest.Ctx(b)
		for _, sc := range []jetstream.StreamConfig{
			{Name: "L1A", Subjects: []string{"events.>"}, Storage: jetstream.FileStorage},
			{Name: "R1", Subjects: []string{"leafline.receipts.>"}, Storage: jetstream.FileStorage},
		} {
			if _, err := js.CreateStream(ctx, sc); err != nil {
				b.Fatal(err)
			}
		}
		statePath := filepath.Join(dir, "completion.db")
		cfg := completiontest.TrackingConfig(jstest.Connect(b, srv))
		cfg.Expected = func(string) []string { return []string{"edge-2"} }
		cfg.HeldMaxPerSite, cfg.HeldMaxBytesPerSite = bound, -1
		cfg.ApplyBatch, cfg.BatchSize = state.ServiceApplyBatch, state.ServiceBatchSize
		sjs := cfg.JS
		cfg.OpenState = func(ctx context.Context) (record.State, error) {
			return state.Open(ctx, state.Config{JS: sjs, Path: statePath, ImportBucket: "-",
				Sites: cfg.Sites, HoldUntilOrigin: true, Logger: completiontest.QuietLog})
		}
		svc, err := completion.NewService(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := svc.Setup(ctx); err != nil {
			b.Fatal(err)
		}
		completiontest.Run(b, svc)
		runtime.GC()
		rss0, heap0 := residentBytes(b), heapInuse()
		disk0 := floodDisk(b, js, statePath)

		var peak, peakBytes atomic.Int64
		stopSampling := make(chan struct{})
		var sampling sync.WaitGroup
		sampling.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				u := svc.HeldBySite()["edge-1"]
				peak.Store(max(peak.Load(), int64(u.Receipts)))
				peakBytes.Store(max(peakBytes.Load(), u.Bytes))
				select {
				case <-stopSampling:
					return
				case <-tick.C:
				}
			}
		})

		load, _ := os.ReadFile("/proc/loadavg")
		start := time.Now()
		pjs := jstest.Connect(b, srv)
		const bundle = 500
		forged, genuine := *heldFloodN, *heldFloodGenuine
		perBundle := max(1, genuine*bundle/max(forged, 1)) // genuine events sent with each forged bundle
		var sentGenuine []string
		for i := 0; i < forged; i += bundle {
			var recs [][]byte
			var ids []string
			for j := i; j < min(i+bundle, forged); j++ {
				r := receipt.New(fmt.Sprintf("forged-%07d", j), "L1A", "edge-1", "edge-1", receipt.StatusProcessed, time.Now())
				data, err := r.Encode()
				if err != nil {
					b.Fatal(err)
				}
				recs, ids = append(recs, data), append(ids, r.MsgID())
			}
			publishFloodBundle(b, pjs, "edge-1", recs, ids)
			var grecs [][]byte
			var gids []string
			for k := 0; k < perBundle && len(sentGenuine) < genuine; k++ {
				id := fmt.Sprintf("real-%06d", len(sentGenuine))
				m := nats.NewMsg("events.real")
				m.Header.Set(jetstream.MsgIDHeader, id)
				if _, err := pjs.PublishMsgAsync(m); err != nil {
					b.Fatal(err)
				}
				r := receipt.New(id, "L1A", "edge-2", "edge-2", receipt.StatusProcessed, time.Now())
				data, err := r.Encode()
				if err != nil {
					b.Fatal(err)
				}
				grecs, gids = append(grecs, data), append(gids, r.MsgID())
				sentGenuine = append(sentGenuine, id)
			}
			if len(grecs) > 0 {
				publishFloodBundle(b, pjs, "edge-2", grecs, gids)
			}
		}
		select {
		case <-pjs.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("publishes not acknowledged")
		}
		published := time.Since(start)
		check.For(b, 30*time.Minute, 100*time.Millisecond, func() error {
			if got := svc.Stats().Received; got < uint64(forged+len(sentGenuine)) {
				return fmt.Errorf("received %d of %d", got, forged+len(sentGenuine))
			}
			return nil
		})
		// The receipts are all in; the last batches' held receipts may still
		// be on their way out.
		check.For(b, 5*time.Minute, 100*time.Millisecond, func() error {
			if u := svc.HeldBySite()["edge-1"]; bound >= 0 && u.Receipts > bound {
				return fmt.Errorf("edge-1 holds %d", u.Receipts)
			}
			return nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		check.For(b, 5*time.Minute, 100*time.Millisecond, func() error {
			sum, err := svc.Summary(ctx)
			if err != nil {
				return err
			}
			if sum.Complete < int64(len(sentGenuine)) {
				return fmt.Errorf("%d of %d genuine events complete", sum.Complete, len(sentGenuine))
			}
			return nil
		})
		genuineDone := time.Since(start)
		close(stopSampling)
		sampling.Wait()
		held, err := svc.State().HeldEvents(ctx, forged+1)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		rss1, heap1 := residentBytes(b), heapInuse()
		disk1 := floodDisk(b, js, statePath)
		u := svc.HeldBySite()["edge-1"]
		st := svc.Stats()
		b.Logf("load at start %s; %d forged receipts from edge-1 in bundles of %d, %d genuine events of edge-2, all published in %s",
			strings.TrimSpace(string(load)), forged, bundle, len(sentGenuine), published.Round(time.Millisecond))
		b.Logf("bound %d: edge-1 holds %d receipts, %d bytes (peak %d, %d bytes); state holds %d events origin_unknown; held_limited %d, received %d; genuine complete after %s",
			bound, u.Receipts, u.Bytes, peak.Load(), peakBytes.Load(), len(held), st.HeldLimited, st.Received, genuineDone.Round(time.Millisecond))
		b.Logf("rss %d → %d MiB, heap in use %d → %d MiB", rss0>>20, rss1>>20, heap0>>20, heap1>>20)
		b.Logf("disk before: %s", disk0)
		b.Logf("disk after:  %s", disk1)
		b.ReportMetric(float64(peak.Load()), "peak-held")
		b.ReportMetric(float64(u.Receipts), "held-after")
		b.ReportMetric(float64(rss1-rss0)/(1<<20), "rss-MiB-added")
		b.ReportMetric(float64(disk1.state-disk0.state)/(1<<20), "state-file-MiB-added")
		b.ReportMetric(genuineDone.Seconds(), "s-to-genuine-done")
		b.ReportMetric(0, "ns/op")
	}
}

func publishFloodBundle(b *testing.B, js jetstream.JetStream, site string, recs [][]byte, ids []string) {
	b.Helper()
	body, err := receipt.EncodeBundle(recs)
	if err != nil {
		b.Fatal(err)
	}
	m := nats.NewMsg("leafline.receipts." + site + "." + receipt.BundleToken)
	m.Data = body
	m.Header.Set(receipt.BundleHeader, strconv.Itoa(len(recs)))
	m.Header.Set(jetstream.MsgIDHeader, receipt.BundleMsgID(ids))
	if _, err := js.PublishMsgAsync(m); err != nil {
		b.Fatal(err)
	}
}

// floodUsage is the disk of the state file and of the streams.
type floodUsage struct {
	state   int64
	streams map[string]uint64
}

func (u floodUsage) String() string {
	var parts []string
	parts = append(parts, fmt.Sprintf("state file %.1f MiB", float64(u.state)/(1<<20)))
	for _, s := range []string{"R1", completion.DefaultQuarantineStream, state.DefaultLogStream, "L1A"} {
		parts = append(parts, fmt.Sprintf("%s %.1f MiB", s, float64(u.streams[s])/(1<<20)))
	}
	return strings.Join(parts, ", ")
}

func floodDisk(b *testing.B, js jetstream.JetStream, statePath string) floodUsage {
	b.Helper()
	u := floodUsage{streams: map[string]uint64{}}
	if fi, err := os.Stat(statePath); err == nil {
		u.state = fi.Size()
	}
	for _, s := range []string{"R1", completion.DefaultQuarantineStream, state.DefaultLogStream, "L1A"} {
		st, err := js.Stream(context.Background(), s)
		if err != nil {
			continue
		}
		u.streams[s] = st.CachedInfo().State.Bytes
	}
	return u
}

// residentBytes is the process's resident set (VmRSS).
func residentBytes(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func heapInuse() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
