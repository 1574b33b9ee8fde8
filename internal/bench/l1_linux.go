//go:build linux

package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/receipts"
)

// l1Sites are the two processors every event of phase l1 expects.
var l1Sites = []string{"edge-1", "edge-2"}

// l1Res are the figures of phase l1.
type l1Res struct {
	ceiling          float64 // receipts/s written to R1 in atomic batches of 1000 (b2's measure, here)
	eps              float64 // events/s L1 applied (origin and both receipts)
	cpuPer1k         float64 // CPU-s per 1k events applied
	flushesPerEvent  float64 // disk flushes per event applied (-1: unknown)
	cpuSmall, cpuBig float64 // CPU-s per 1k events applied at 10k and at L1Tracked events tracked
	summaryP99       time.Duration
	tracked          int
	stats            completion.Stats // of the l1 row's state
	rebuild          time.Duration    // a lost file folded again from the log, at tracked events
	// the KV store of the previous layout, on 10k events
	kvEps, kvCPUPer1k, kvFlushes float64
}

// l1Box is an L1 alone: an embedded server under SyncAlways with L1A and
// R1, and the completion service over package completion's state.
type l1Box struct {
	b   *tb
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	svc *receipts.Service
	seq uint64 // events generated so far
}

// newL1Box starts an L1 alone; with kv, its completion service records in
// the KV store of the previous layout (receipts.Store) instead.
func newL1Box(b *tb, kv bool) *l1Box {
	dir := b.TempDir()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "js"),
		SyncAlways: true, NoLog: true, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		b.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		b.Fatal("l1: server not ready")
	}
	b.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	for _, sc := range []jetstream.StreamConfig{
		{Name: "L1A", Subjects: []string{"events.>"}, Storage: jetstream.FileStorage, AllowAtomicPublish: true, Duplicates: time.Second},
		{Name: "R1", Subjects: []string{"receipts.>"}, Storage: jetstream.FileStorage, AllowAtomicPublish: true, Duplicates: time.Second},
	} {
		if _, err := js.CreateStream(b.ctx, sc); err != nil {
			b.Fatal(err)
		}
	}
	x := &l1Box{b: b, srv: srv, nc: nc, js: js}
	cfg := receipts.ServiceConfig{
		JS: js, Stream: "R1", OriginStream: "L1A",
		Expected:   func(string) []string { return l1Sites },
		Sites:      l1Sites,
		ApplyBatch: completion.ServiceApplyBatch,
		BatchSize:  completion.ServiceBatchSize,
		OpenState: func(ctx context.Context) (receipts.State, error) {
			return completion.Open(ctx, completion.Config{JS: js, Path: filepath.Join(dir, "completion.db"), ImportBucket: "-",
				Sites: l1Sites, HoldUntilOrigin: true, Logger: benchLogger()})
		},
		Logger: benchLogger(),
	}
	if kv {
		cfg.OpenState, cfg.ApplyBatch, cfg.BatchSize = nil, 0, 0
	}
	x.svc, err = receipts.NewService(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return x
}

// generate writes n new events to L1A and, for the first withReceipts of
// them, both receipts to R1, all in atomic batches of 1000; it returns the
// receipts written per second.
func (x *l1Box) generate(n, withReceipts int, payload []byte) float64 {
	ctx := x.b.ctx
	first := x.seq
	x.seq += uint64(n)
	id := func(i uint64) string { return fmt.Sprintf("l1-%010d", i) }
	batch := make([]*nats.Msg, 0, 1000)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if _, err := jetstreamext.PublishMsgBatch(ctx, x.js, batch); err != nil {
			x.b.Fatalf("l1: generate: %v", err)
		}
		batch = batch[:0]
	}
	for i := first; i < first+uint64(n); i++ {
		m := nats.NewMsg(fmt.Sprintf("events.l1.%d", i%8))
		m.Data = payload
		m.Header.Set(jetstream.MsgIDHeader, id(i))
		if batch = append(batch, m); len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
	at := time.Now()
	t0 := time.Now()
	written := 0
	for i := first; i < first+uint64(withReceipts); i++ {
		for _, site := range l1Sites {
			data, err := receipts.New(id(i), "L1A", site, site, receipts.StatusProcessed, at).Encode()
			if err != nil {
				x.b.Fatal(err)
			}
			m := nats.NewMsg("receipts." + site + ".processed")
			m.Data = data
			if batch = append(batch, m); len(batch) == cap(batch) {
				flush()
			}
			written++
		}
	}
	flush()
	return float64(written) / time.Since(t0).Seconds()
}

// drain runs the completion service until every generated event has a
// record and complete ones number wantComplete, then stops it (its state
// stays open for the next drain).
func (x *l1Box) drain(want, wantComplete int64) {
	ctx, cancel := context.WithCancel(x.b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = x.svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(60 * time.Minute)
	for {
		if st := x.svc.State(); st != nil {
			if sum, err := st.Summary(ctx); err == nil && sum.Events >= want && sum.Complete >= wantComplete {
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			x.b.Fatalf("l1: drain did not reach %d events (%d complete)", want, wantComplete)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop closes the state and the server.
func (x *l1Box) stop() {
	if st, ok := x.svc.State().(*completion.State); ok {
		st.Close()
	}
	x.nc.Close()
	x.srv.Shutdown()
	x.srv.WaitForShutdown()
}

// l1Alone is phase l1: L1 without a hub or edges. Its rows:
//
//	l1g  the generator's receipts into R1 (atomic batches of 1000): the
//	     receipt ceiling of this run;
//	l1   L1 applies L1Events events (their origins and both receipts),
//	     written beforehand;
//	l1kv the same for 10k events with the KV store of the previous
//	     layout, for comparison;
//	l1s  the same for 10k events on an empty state, and l1m for 10k more
//	     with L1Tracked events tracked, half of them pending (the flat
//	     cost); then summary p99 over 100 calls; l1r a lost state file
//	     rebuilt from the log.
func (r *run) l1Alone() {
	o := r.o
	x := newL1Box(r.tb, false)
	var res l1Res
	res.ceiling = x.generate(o.L1Events, o.L1Events, r.payload)
	r.rows = append(r.rows, benchRow{key: "l1g", what: "generator: receipts into R1, atomic batch 1000 (SyncAlways)", n: 2 * o.L1Events,
		dur: time.Duration(float64(2*o.L1Events) / res.ceiling * float64(time.Second)), flushes: -1, note: "the receipt ceiling of this run"})
	ph := r.begin("l1")
	x.drain(int64(o.L1Events), int64(o.L1Events))
	row := ph.end("l1", "L1 alone: origins + 2 receipts per event applied", o.L1Events, nil, "written beforehand; per event")
	r.rows = append(r.rows, row)
	res.eps, res.cpuPer1k = row.eps(), row.cpu.Seconds()/float64(o.L1Events)*1000
	if st, ok := x.svc.State().(*completion.State); ok {
		res.stats = st.Stats()
	}
	res.flushesPerEvent = -1
	if row.flushes >= 0 {
		res.flushesPerEvent = float64(row.flushes) / float64(o.L1Events)
	}
	x.stop()
	r.l1 = &res

	// The same for the KV store of the previous layout, on 10k events.
	const small = 10_000
	z := newL1Box(r.tb, true)
	z.generate(small, small, r.payload)
	ph = r.begin("l1kv")
	z.drain(small, small)
	rk := ph.end("l1kv", "L1 alone, KV store of the previous layout: 10k events", small, nil, "for comparison, same run")
	r.rows = append(r.rows, rk)
	res.kvEps, res.kvCPUPer1k = rk.eps(), rk.cpu.Seconds()/small*1000
	res.kvFlushes = -1
	if rk.flushes >= 0 {
		res.kvFlushes = float64(rk.flushes) / small
	}
	z.stop()

	// Flat: the cost of 10k events on an empty state, and of 10k more with
	// L1Tracked tracked, half of them pending.
	y := newL1Box(r.tb, false)
	y.generate(small, small, r.payload)
	ph = r.begin("l1s")
	y.drain(small, small)
	rs := ph.end("l1s", "L1 alone: 10k events, empty state", small, nil, "")
	r.rows = append(r.rows, rs)
	bulk := max(0, o.L1Tracked-2*small)
	y.generate(bulk, bulk/2, r.payload)
	y.drain(int64(small+bulk), int64(small+bulk/2))
	y.generate(small, small, r.payload)
	ph = r.begin("l1m")
	y.drain(int64(2*small+bulk), int64(2*small+bulk/2))
	rm := ph.end("l1m", fmt.Sprintf("L1 alone: 10k events, %d tracked, half pending", 2*small+bulk), small, nil, "")
	r.rows = append(r.rows, rm)
	res.tracked = 2*small + bulk
	res.cpuSmall, res.cpuBig = rs.cpu.Seconds()/small*1000, rm.cpu.Seconds()/small*1000
	var lat []time.Duration
	for range 100 {
		t0 := time.Now()
		if _, err := y.svc.Summary(r.ctx); err != nil {
			r.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	res.summaryP99 = lat[98]
	// A box whose file is lost: fold the whole log into a new one.
	ph = r.begin("l1r")
	st, err := completion.Open(r.ctx, completion.Config{JS: y.js, Path: filepath.Join(r.TempDir(), "rebuilt.db"), ImportBucket: "-",
		Sites: l1Sites, HoldUntilOrigin: true, Logger: benchLogger()})
	if err != nil {
		r.Fatal(err)
	}
	if err := st.WaitReady(r.ctx); err != nil {
		r.Fatal(err)
	}
	rb := ph.end("l1r", fmt.Sprintf("L1 alone: a lost file rebuilt from the log (%d entries)", st.Stats().Applied), res.tracked, nil, "per event tracked")
	st.Close()
	r.rows = append(r.rows, rb)
	res.rebuild = rb.dur
	y.stop()
}

// l1Figures prints phase l1's ratios and returns its figures.
func (r *run) l1Figures() []Figure {
	res := r.l1
	if res == nil {
		return nil
	}
	out := r.out
	fmt.Fprintf(out, "l1: applied %.0f events/s against a receipt ceiling of %.0f/s (%.3f×; target ≥ 0.25×), %.3f CPU-s per 1k events (target ≤ 0.1), %.4f disk flushes per event (target ≤ 0.05)\n",
		res.eps, res.ceiling, res.eps/res.ceiling, res.cpuPer1k, res.flushesPerEvent)
	fmt.Fprintf(out, "l1: CPU per 1k events %.3f s at 10k tracked, %.3f s at %d tracked (ratio %.3f; target ≤ 1.25); summary p99 %.2f ms over 100 calls (target ≤ 5)\n",
		res.cpuSmall, res.cpuBig, res.tracked, res.cpuBig/res.cpuSmall, float64(res.summaryP99)/1e6)
	fmt.Fprintf(out, "l1: the KV store of the previous layout, same run: %.0f events/s, %.3f CPU-s per 1k events, %.3f disk flushes per event (the state: %.1f× the rate at %.2f× the CPU per event)\n",
		res.kvEps, res.kvCPUPer1k, res.kvFlushes, res.eps/res.kvEps, res.cpuPer1k/res.kvCPUPer1k)
	fmt.Fprintf(out, "l1: a lost file rebuilt from the log in %.1f s (%d events tracked)\n", res.rebuild.Seconds(), res.tracked)
	if st := res.stats; st.Entries > 0 {
		fmt.Fprintf(out, "l1: %d log entries appended, %.0f inputs (receipts, origins) each; %d appends another box got in first\n",
			st.Entries, float64(st.Inputs)/float64(st.Entries), st.Conflicts)
	}
	return []Figure{
		{"l1_eps", res.eps}, {"l1_ceiling_eps", res.ceiling}, {"l1_cpu_s_per_1k", res.cpuPer1k},
		{"l1_flushes_per_event", res.flushesPerEvent}, {"l1_flat_ratio", res.cpuBig / res.cpuSmall},
		{"summary_p99_ms", float64(res.summaryP99) / 1e6}, {"l1_rebuild_s", res.rebuild.Seconds()}, {"l1_kv_eps", res.kvEps}, {"l1_kv_cpu_s_per_1k", res.kvCPUPer1k},
	}
}
