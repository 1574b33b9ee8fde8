//go:build linux

package bench

import (
	"cmp"
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
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/receipt"
)

// l1Sites are the two processors every event of phase l1 expects.
var l1Sites = []string{"edge-1", "edge-2"}

// l1Res are the figures of phase l1.
type l1Res struct {
	ceiling  float64 // receipts/s written to R1 in atomic batches of 1000 (b2's measure, here)
	eps      float64 // events/s L1 applied (origin and both receipts, in bundles)
	cpuPer1k float64 // CPU-s per 1k events applied
	// the same with one message per receipt
	singleEps, singleCPUPer1k float64
	flushesPerEvent           float64 // disk flushes per event applied (-1: unknown)
	cpuSmall, cpuBig          float64 // CPU-s per 1k events applied at 10k and at L1Tracked events tracked
	summaryP99                time.Duration
	tracked                   int
	stats                     state.Stats   // of the l1 row's state
	rebuild                   time.Duration // a lost file folded again from the log, at tracked events
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
	svc *completion.Service
	seq uint64 // events generated so far
	// payload of every event
	payload []byte
	// events and complete are what the state holds once it has applied
	// everything written.
	events, complete int64
}

// newL1Box starts an L1 alone; with kv, its completion service records in
// the KV store of the previous layout (kvstore.Store) instead.
func newL1Box(b *tb, kv bool, payload []byte) *l1Box {
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
	x := &l1Box{b: b, srv: srv, nc: nc, js: js, payload: payload}
	cfg := completion.ServiceConfig{
		JS: js, Stream: "R1", OriginStream: "L1A",
		Expected:   func(string) []string { return l1Sites },
		Sites:      l1Sites,
		ApplyBatch: state.ServiceApplyBatch,
		BatchSize:  state.ServiceBatchSize,
		OpenState: func(ctx context.Context) (record.State, error) {
			return state.Open(ctx, state.Config{JS: js, Path: filepath.Join(dir, "completion.db"), ImportBucket: "-",
				Sites: l1Sites, HoldUntilOrigin: true, Logger: benchLogger()})
		},
		Logger: benchLogger(),
	}
	if kv {
		cfg.OpenState, cfg.ApplyBatch, cfg.BatchSize = nil, 0, 0
	}
	x.svc, err = completion.NewService(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return x
}

// writeOrigins writes n new events to L1A in atomic batches of 1000 and
// returns the first one's index.
func (x *l1Box) writeOrigins(n int, payload []byte) uint64 {
	first := x.seq
	x.seq += uint64(n)
	w := x.batchWriter()
	for i := first; i < first+uint64(n); i++ {
		m := nats.NewMsg(fmt.Sprintf("events.l1.%d", i%8))
		m.Data = payload
		m.Header.Set(jetstream.MsgIDHeader, l1EventID(i))
		w.add(m)
	}
	w.flush()
	return first
}

func l1EventID(i uint64) string { return fmt.Sprintf("l1-%010d", i) }

// writeReceipts writes both receipts of n events from first to R1, in
// atomic batches of 1000 messages, and returns the receipts written per
// second. With bundled, the receipts of each site go as edges publish
// them, in bundles of up to 1000 (receipt.EncodeBundle), else one
// message each.
func (x *l1Box) writeReceipts(first uint64, n int, bundled bool) float64 {
	w := x.batchWriter()
	at := time.Now()
	t0 := time.Now()
	bundles := map[string][][]byte{}
	bundle := func(site string) {
		recs := bundles[site]
		if len(recs) == 0 {
			return
		}
		body, err := receipt.EncodeBundle(recs)
		if err != nil {
			x.b.Fatal(err)
		}
		m := nats.NewMsg("receipts." + site + "." + receipt.BundleToken)
		m.Data = body
		m.Header.Set(receipt.BundleHeader, fmt.Sprint(len(recs)))
		w.add(m)
		bundles[site] = recs[:0]
	}
	for i := first; i < first+uint64(n); i++ {
		for _, site := range l1Sites {
			data, err := receipt.New(l1EventID(i), "L1A", site, site, receipt.StatusProcessed, at).Encode()
			if err != nil {
				x.b.Fatal(err)
			}
			if !bundled {
				m := nats.NewMsg("receipts." + site + ".processed")
				m.Data = data
				w.add(m)
				continue
			}
			if bundles[site] = append(bundles[site], data); len(bundles[site]) == receipt.MaxBundleReceipts {
				bundle(site)
			}
		}
	}
	for _, site := range l1Sites {
		bundle(site)
	}
	w.flush()
	return float64(2*n) / time.Since(t0).Seconds()
}

// l1Writer writes messages in atomic batches of 1000.
type l1Writer struct {
	x     *l1Box
	batch []*nats.Msg
}

func (x *l1Box) batchWriter() *l1Writer { return &l1Writer{x: x, batch: make([]*nats.Msg, 0, 1000)} }

func (w *l1Writer) add(m *nats.Msg) {
	if w.batch = append(w.batch, m); len(w.batch) == cap(w.batch) {
		w.flush()
	}
}

func (w *l1Writer) flush() {
	if len(w.batch) == 0 {
		return
	}
	if _, err := jetstreamext.PublishMsgBatch(w.x.b.ctx, w.x.js, w.batch); err != nil {
		w.x.b.Fatalf("l1: write: %v", err)
	}
	w.batch = w.batch[:0]
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

// apply has L1 apply n new events, in the order they reach L1 in service:
// their origins first (written, then drained), then both receipts of the
// first withReceipts of them (written, then drained). key names the
// measured row (the two drains, summed; "" measures nothing). It returns
// the row and the rate at which the receipts were written.
func (x *l1Box) apply(key, what string, n, withReceipts int, bundled bool) (benchRow, float64) {
	r := x.b
	label := key
	if label == "" {
		label = "a tracked state"
	}
	r.m.Track(label+": origins written", "", 0, nil)
	first := x.writeOrigins(n, x.payload)
	x.events += int64(n)
	r.m.Track(label+": origins applied", "events", int64(n), x.summaryCount(func(s record.Summary) int64 { return s.Events }))
	var ph *benchPhase
	if key != "" {
		ph = r.begin(key + "_origins")
	}
	x.drain(x.events, x.complete)
	var origins benchRow
	if ph != nil {
		origins = ph.end(key, what, n, nil, "")
	}
	r.m.Track(label+": receipts written", "", 0, nil)
	written := x.writeReceipts(first, withReceipts, bundled)
	x.complete += int64(withReceipts)
	r.m.Track(label+": receipts applied", "events complete", int64(withReceipts), x.summaryCount(func(s record.Summary) int64 { return s.Complete }))
	if ph != nil {
		ph = r.begin(key + "_receipts")
	}
	x.drain(x.events, x.complete)
	if ph == nil {
		return benchRow{}, written
	}
	rcpt := ph.end(key, what, n, nil, "")
	row := origins
	row.dur += rcpt.dur
	row.cpu += rcpt.cpu
	row.rssKB = max(row.rssKB, rcpt.rssKB)
	if row.flushes >= 0 && rcpt.flushes >= 0 {
		row.flushes += rcpt.flushes
	} else {
		row.flushes = -1
	}
	row.note = fmt.Sprintf("origins %.2fs + receipts %.2fs", origins.dur.Seconds(), rcpt.dur.Seconds())
	return row, written
}

// summaryCount returns a count for the progress line: what f reads in
// the state's summary, from 0 at the call.
func (x *l1Box) summaryCount(f func(record.Summary) int64) func() int64 {
	read := func() int64 {
		st := x.svc.State()
		if st == nil {
			return 0
		}
		ctx, cancel := context.WithTimeout(x.b.ctx, time.Second)
		defer cancel()
		sum, err := st.Summary(ctx)
		if err != nil {
			return 0
		}
		return f(sum)
	}
	c0 := read()
	return func() int64 { return max(0, read()-c0) }
}

// stop closes the state and the server.
func (x *l1Box) stop() {
	if st, ok := x.svc.State().(*state.State); ok {
		st.Close()
	}
	x.nc.Close()
	x.srv.Shutdown()
	x.srv.WaitForShutdown()
}

// l1Alone is phase l1: L1 without a hub or edges. Each row has L1 apply
// its events as they reach L1 in service (apply): the origins, then the
// receipts. Its rows:
//
//	l1g   the generator's receipts into R1 (atomic batches of 1000, one
//	      message per receipt): the receipt ceiling of this run;
//	l1one L1 applies L1Events events (their origins and both receipts,
//	      one message per receipt: as a receipt published again travels);
//	l1    the same with the receipts in bundles, as edges publish them;
//	l1kv  the same for 10k events with the KV store of the previous
//	      layout, for comparison;
//	l1s   30k events on a state of 10k events, and l1m 30k on one of
//	      L1Tracked events, half of them pending (the flat cost; each the
//	      median of three samples taken in turn); then summary p99 over
//	      100 calls; l1r a lost state file rebuilt from the log.
func (r *run) l1Alone() {
	var res l1Res
	r.l1 = &res
	r.l1Bundles(&res)
	r.l1KV(&res)
	y := r.l1Flat(&res)
	defer y.stop()
	r.l1Queries(&res, y)
}

// l1Bundles runs l1one (with the receipt ceiling, l1g) and l1.
func (r *run) l1Bundles(res *l1Res) {
	o := r.o
	x := newL1Box(r.tb, false, r.payload)
	single, ceiling := x.apply("l1one", "L1 alone: origins + 2 receipts per event, one message per receipt", o.L1Events, o.L1Events, false)
	res.ceiling = ceiling
	r.rows = append(r.rows, benchRow{key: "l1g", what: "generator: receipts into R1, atomic batch 1000 (SyncAlways)", n: 2 * o.L1Events,
		dur: time.Duration(float64(2*o.L1Events) / res.ceiling * float64(time.Second)), flushes: -1, note: "the receipt ceiling of this run"}, single)
	res.singleEps, res.singleCPUPer1k = single.eps(), single.cpu.Seconds()/float64(o.L1Events)*1000
	x.stop()

	x = newL1Box(r.tb, false, r.payload)
	defer x.stop()
	row, _ := x.apply("l1", "L1 alone: origins + 2 receipts per event, receipts in bundles", o.L1Events, o.L1Events, true)
	r.rows = append(r.rows, row)
	res.eps, res.cpuPer1k = row.eps(), row.cpu.Seconds()/float64(o.L1Events)*1000
	if st, ok := x.svc.State().(*state.State); ok {
		res.stats = st.Stats()
	}
	res.flushesPerEvent = -1
	if row.flushes >= 0 {
		res.flushesPerEvent = float64(row.flushes) / float64(o.L1Events)
	}
}

// l1Small is the size of the kv sample and of the small state of l1s.
const l1Small = 10_000

// l1KV runs l1kv: the same for the KV store of the previous layout, on
// l1Small events.
func (r *run) l1KV(res *l1Res) {
	z := newL1Box(r.tb, true, r.payload)
	defer z.stop()
	rk, _ := z.apply("l1kv", "L1 alone, KV store of the previous layout: 10k events", l1Small, l1Small, false)
	r.rows = append(r.rows, rk)
	res.kvEps, res.kvCPUPer1k = rk.eps(), rk.cpu.Seconds()/l1Small*1000
	res.kvFlushes = -1
	if rk.flushes >= 0 {
		res.kvFlushes = float64(rk.flushes) / l1Small
	}
}

// l1Flat runs l1s and l1m: the cost of flatSample events on a state of
// l1Small events, and on one of L1Tracked, half of them pending. The two
// states are two boxes, sampled in turn flatRounds times (the median of
// each counts), so that a drift in the machine's speed weighs on both
// alike; a sample of this size leaves out what starting the service
// costs. It returns the large box, still running.
func (r *run) l1Flat(res *l1Res) *l1Box {
	const flatSample, flatRounds = 30_000, 3
	s10k := newL1Box(r.tb, false, r.payload)
	s10k.apply("", "", l1Small, l1Small, true)
	y := newL1Box(r.tb, false, r.payload)
	bulk := max(0, r.o.L1Tracked-flatRounds*flatSample)
	y.apply("", "", bulk, bulk/2, true)
	var smalls, bigs []benchRow
	for range flatRounds {
		rs, _ := s10k.apply("l1s", fmt.Sprintf("L1 alone: %dk events from 10k tracked (median of %d)", flatSample/1000, flatRounds), flatSample, flatSample, true)
		rm, _ := y.apply("l1m", fmt.Sprintf("L1 alone: %dk events at %d tracked, half pending (median of %d)", flatSample/1000, r.o.L1Tracked, flatRounds), flatSample, flatSample, true)
		smalls, bigs = append(smalls, rs), append(bigs, rm)
	}
	s10k.stop()
	byCPU := func(a, b benchRow) int { return cmp.Compare(a.cpu, b.cpu) }
	slices.SortFunc(smalls, byCPU)
	slices.SortFunc(bigs, byCPU)
	rs, rm := smalls[flatRounds/2], bigs[flatRounds/2]
	r.rows = append(r.rows, rs, rm)
	res.tracked = bulk + flatRounds*flatSample
	res.cpuSmall, res.cpuBig = rs.cpu.Seconds()/flatSample*1000, rm.cpu.Seconds()/flatSample*1000
	return y
}

// l1Queries times the summary on y's state (p99 over 100 calls), and
// l1r: y's state file lost, folded again from the whole log.
func (r *run) l1Queries(res *l1Res, y *l1Box) {
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
	ph := r.begin("l1r")
	st, err := state.Open(r.ctx, state.Config{JS: y.js, Path: filepath.Join(r.TempDir(), "rebuilt.db"), ImportBucket: "-",
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
	fmt.Fprintf(out, "l1: with one message per receipt: %.0f events/s (%.3f×), %.3f CPU-s per 1k events\n",
		res.singleEps, res.singleEps/res.ceiling, res.singleCPUPer1k)
	fmt.Fprintf(out, "l1: CPU per 1k events %.3f s from 10k tracked, %.3f s at %d tracked (ratio %.3f; target ≤ 1.25); summary p99 %.2f ms over 100 calls (target ≤ 5)\n",
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
		{"l1_single_eps", res.singleEps}, {"l1_single_cpu_s_per_1k", res.singleCPUPer1k},
		{"summary_p99_ms", float64(res.summaryP99) / 1e6}, {"l1_rebuild_s", res.rebuild.Seconds()}, {"l1_kv_eps", res.kvEps}, {"l1_kv_cpu_s_per_1k", res.kvCPUPer1k},
	}
}
