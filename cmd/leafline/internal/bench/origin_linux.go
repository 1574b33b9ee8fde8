//go:build linux

package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/publish"
	"github.com/leafline/leafline/status"
	"github.com/leafline/leafline/topology"
)

// originWithin bounds origin's wait for the last completion.
const originWithin = 30 * time.Minute

// originResult is what origin measured.
type originResult struct {
	key      string
	n        int
	capBytes int64
	dur      time.Duration
	// peak is the most bytes L1A held, sampled every 100 ms.
	peak int64
	// refused is the events the publisher reported not stored; waits its
	// attempts made again while L1A was full or had no leader.
	refused, waits int64
	complete       int64
	// deleted and purged are L1's cleanup counters, audited the records
	// in its audit stream, left the messages L1A still held.
	deleted, purged, audited, left int64
}

// origin is the phase origin: l1, a hub and two edges as four processes
// (as memory lays them out), L1's jetstream.max_stream_bytes OriginStreamMiB
// and every other setting its default (cleanup on). Origin events of 1 KiB
// (five times the cap by default) are published at L1 as fast as the
// publisher goes, until each is complete at L1. It reports whether any
// publish was refused, the most L1A held against its cap, and the
// cleanup's deletes against its audit records.
func (r *run) origin() {
	r.m.Phase("origin four processes, L1A capped [relay]")
	runs := []originResult{
		{key: "origin", n: r.o.Origin, capBytes: int64(r.o.OriginStreamMiB) << 20},
		{key: "origin_default", n: r.o.Origin}, // capBytes: L1's default
	}
	for i := range runs {
		r.originRun(&runs[i])
		x := runs[i]
		r.rows = append(r.rows, benchRow{key: x.key, what: fmt.Sprintf("four processes, L1A capped at %d MiB, %d B events, defaults: publish -> complete at L1 [relay]", x.capBytes>>20, originSize),
			n: x.n, dur: x.dur, flushes: -1, note: originNote(x)})
	}
	r.origins = runs
}

// originRun runs one system of origin, L1A capped at x.capBytes, and
// fills in x.
func (r *run) originRun(x *originResult) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sys := r.startFour(x.key, memorySites, func(site string, c *topology.Config) {
		if site == "l1" {
			if x.capBytes > 0 {
				c.JetStream.MaxStreamBytes = x.capBytes
			}
			return
		}
		c.JetStream.MaxStreamBytes = max(c.JetStream.MaxStreamBytes, int64(x.n)*(originSize+1024)*3/2)
	})
	defer sys.stop()
	l1 := r.dial(sys.env.ls.Configs["l1"].NATS.Listen)
	js, _ := jetstream.New(l1)
	if st, err := js.Stream(r.ctx, "L1A"); err == nil {
		x.capBytes = st.CachedInfo().Config.MaxBytes
	}

	var done atomic.Int64
	r.m.Track(x.key+": published -> complete at L1", "events", int64(x.n), done.Load)
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			if st, err := js.Stream(sctx, "L1A"); err == nil {
				peak.Store(max(peak.Load(), int64(st.CachedInfo().State.Bytes)))
			}
			scancel()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	p, err := publish.New(publish.Config{JS: js, Stream: "L1A"})
	if err != nil {
		r.Fatal(err)
	}
	payload := benchPayload(originSize)
	start := time.Now()
	pubErr := make(chan error, 1)
	var refused atomic.Int64
	go func() {
		evs := make([]publish.Event, 0, publish.DefaultBatch)
		for i := 0; i < x.n; i += len(evs) {
			evs = evs[:0]
			for j := i; j < min(i+publish.DefaultBatch, x.n); j++ {
				evs = append(evs, publish.Event{ID: r.id("origin")(j), Subject: fmt.Sprintf("events.origin.%d", j%8), Data: payload})
			}
			if _, err := p.Publish(ctx, evs); err != nil {
				refused.Add(int64(x.n - i))
				pubErr <- err
				return
			}
		}
		pubErr <- nil
	}()
	sc := status.NewStatusClient(l1, "")
	sys.env.waitUntil("origin: complete at L1", originWithin, func() bool {
		select {
		case err := <-pubErr:
			if err != nil {
				r.Fatalf("bench: origin: publish refused: %v", err)
			}
		default:
		}
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		defer qcancel()
		sum, err := sc.Summary(qctx)
		if err != nil {
			return false
		}
		done.Store(sum.Complete)
		return sum.Complete >= int64(x.n)
	})
	x.dur = time.Since(start)
	x.complete, x.refused, x.waits = done.Load(), refused.Load(), p.Retries()
	// The cleanup goes on after the last completion: give it the passes
	// it needs to reach the end, then read its counters and the streams.
	time.Sleep(5 * time.Second)
	cancel()
	<-sampled
	x.peak = peak.Load()
	m := benchMetrics(fmt.Sprintf("http://127.0.0.1:%d/metrics", sys.ops["l1"]), "leafline_cleanup_deleted_total", "leafline_cleanup_purged_total")
	x.deleted, x.purged = int64(m[0]), int64(m[1])
	x.audited = streamMsgs(r.tb, js, sys.env.ls.Configs["l1"].Completion.Cleanup.AuditStream)
	x.left = streamMsgs(r.tb, js, "L1A")
}

func originNote(x originResult) string {
	return fmt.Sprintf("refused %d, lost %d, L1A peak %.1f MiB of %d MiB, publisher waits %d, deleted %d (purged %d), audit records %d, left in L1A %d",
		x.refused, int64(x.n)-x.complete, float64(x.peak)/(1<<20), x.capBytes>>20, x.waits, x.deleted, x.purged, x.audited, x.left)
}

// streamMsgs is the messages a stream holds now.
func streamMsgs(b *tb, js jetstream.JetStream, name string) int64 {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		b.Fatal(fmt.Errorf("stream %s: %w", name, err))
	}
	return int64(st.CachedInfo().State.Msgs)
}

// originFigures prints origin's result and returns its figures.
func (r *run) originFigures() []Figure {
	if len(r.origins) != 2 {
		return nil
	}
	x, open := r.origins[0], r.origins[1]
	eps := func(x originResult) float64 { return float64(x.n) / max(x.dur.Seconds(), 1e-9) }
	fmt.Fprintf(r.out, "origin: %d events of %d B with L1A capped at %d MiB, defaults: %s; %.0f events/s, %.0f at the default cap of %d MiB (ratio %.3f)\n",
		x.n, originSize, x.capBytes>>20, originNote(x), eps(x), eps(open), open.capBytes>>20, eps(x)/eps(open))
	return []Figure{
		{"origin_refused", float64(x.refused)}, {"origin_lost", float64(int64(x.n) - x.complete)},
		{"origin_l1a_peak_fill", float64(x.peak) / float64(x.capBytes)}, {"origin_eps", eps(x)}, {"origin_eps_default", eps(open)},
		{"origin_eps_ratio", eps(x) / eps(open)}, {"origin_unaudited", float64(max(0, x.deleted-x.audited))},
	}
}
