// Package sinkbench is `leafline bench sinks`: the same backlog drained by
// an edge through each sink, side by side in one run, against the store
// sink's rate.
package sinkbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/bbolt"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/internal/cputime"
	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/jsmsg"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/systest"
	"github.com/leafline/leafline/topology"
)

// Names are the rows Sinks measures, in order.
var Names = []string{"store", "file", "http", "http-single", "exec", "postgres", "nats"}

// Options shape Sinks.
type Options struct {
	// Events is the backlog each sink drains. Zero means 20000.
	Events int
	// Size is each event's payload in bytes. Zero means 256.
	Size int
	// Sinks are the rows to run, from Names. Empty means all.
	Sinks []string
	// PostgresDSN is the database of the postgres row; empty skips it.
	PostgresDSN string
	// Dir holds the boxes' data; empty means a temp dir, removed after.
	Dir string
	// Log receives the boxes' logs; nil discards them.
	Log *slog.Logger
	// Progress receives a line per row as it starts; nil discards.
	Progress io.Writer
}

// Row is one sink's measurement: an edge box (L1, a hub and the edge
// in this process, SyncAlways, mutual TLS, signed receipts) drains a
// backlog of Events from its events stream through the sink into a
// trivial target on this machine, from the first sink write to the last
// ACK.
type Row struct {
	Sink   string
	Events int
	// Seconds is the drain's wall time; EPS = Events / Seconds.
	Seconds, EPS float64
	// WriteP50 and WriteP99 are the sink's Write times, one per batch.
	WriteP50, WriteP99 time.Duration
	// CPUPer1k is this process's CPU (user+system) per 1000 events: the
	// embedded servers, the runner, and an in-process target (http, nats);
	// not a worker process or a database server.
	CPUPer1k float64
	// Skipped says why the row did not run (no PostgreSQL, say).
	Skipped string
}

func (o *Options) setDefaults() {
	if o.Events <= 0 {
		o.Events = 20000
	}
	if o.Size <= 0 {
		o.Size = 256
	}
	if len(o.Sinks) == 0 {
		o.Sinks = Names
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Run runs one row per sink, one after the other.
func Run(ctx context.Context, o Options) ([]Row, error) {
	o.setDefaults()
	for _, s := range o.Sinks {
		if !slices.Contains(Names, s) {
			return nil, fmt.Errorf("unknown sink %q (known: %s)", s, strings.Join(Names, ", "))
		}
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "leafline-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	var rows []Row
	for _, name := range o.Sinks {
		fmt.Fprintf(o.Progress, "bench: sink %s: %d events\n", name, o.Events)
		row, err := runSink(ctx, o, name, filepath.Join(dir, name))
		if err != nil {
			return rows, fmt.Errorf("sink %s: %w", name, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// target is a sink under measurement with its trivial target.
type target struct {
	cfg topology.SinkConfig
	// open builds the sink once the box runs (the nats sink needs its
	// connection); nil for the store sink.
	open  func(box *box.App, cfg topology.SinkConfig) (sink.Sink, func(), error)
	close func()
}

func newTarget(o Options, name, dir string) (*target, string, error) {
	tg := &target{close: func() {}}
	switch name {
	case "store":
		tg.cfg = topology.SinkConfig{Type: "store"}
	case "file":
		tg.cfg = topology.SinkConfig{Type: "file", Dir: filepath.Join(dir, "files")}
	case "http", "http-single":
		url, stop, err := httpTarget()
		if err != nil {
			return nil, "", err
		}
		mode := "batch"
		if name == "http-single" {
			mode = "single"
		}
		tg.cfg = topology.SinkConfig{Type: "http", HTTP: &topology.HTTPSinkConfig{URL: url, Mode: mode}}
		tg.close = stop
	case "exec":
		// A worker that answers each line at once: this program itself,
		// started as EchoWorkerArg (see RunEchoWorker).
		exe, err := os.Executable()
		if err != nil {
			return nil, "", err
		}
		tg.cfg = topology.SinkConfig{Type: "exec", Exec: &topology.ExecSinkConfig{Command: []string{exe, EchoWorkerArg}}}
	case "postgres":
		if o.PostgresDSN == "" {
			return nil, "no PostgreSQL (give --postgres-dsn-env)", nil
		}
		env := "LEAFLINE_BENCH_PG_DSN"
		if err := os.Setenv(env, o.PostgresDSN); err != nil {
			return nil, "", err
		}
		tg.cfg = topology.SinkConfig{Type: "postgres", Postgres: &topology.PostgresSinkConfig{DSNEnv: env,
			Table: "leafline_bench_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")}}
	case "nats":
		tg.cfg = topology.SinkConfig{Type: "nats", NATS: &topology.NATSSinkConfig{Subject: "bench.work"}}
	}
	if name != "store" {
		tg.open = func(box *box.App, cfg topology.SinkConfig) (sink.Sink, func(), error) {
			var nc *nats.Conn
			if name == "nats" {
				var err error
				if nc, err = nats.Connect(box.ClientURL()); err != nil {
					return nil, nil, err
				}
				// The service: answers every request at once (an empty
				// reply is "ok").
				if _, err := nc.Subscribe("bench.work", func(m *nats.Msg) { _ = m.Respond(nil) }); err != nil {
					return nil, nil, err
				}
			}
			opened, err := sink.Open(cfg, sink.Deps{NC: nc, Log: o.Log})
			if err != nil {
				return nil, nil, err
			}
			return opened.Sink, func() {
				opened.Close()
				if nc != nil {
					nc.Close()
				}
			}, nil
		}
	}
	return tg, "", nil
}

// EchoWorkerArg, as a program's first argument, makes it the exec row's
// worker: the program's main calls RunEchoWorker when it sees it.
const EchoWorkerArg = "__leafline-bench-echo-worker"

// RunEchoWorker is the least an exec worker can do: it answers every event
// line on stdin with an ok result for its event_id, until stdin ends.
func RunEchoWorker(stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReaderSize(stdin, 256<<10)
	out := bufio.NewWriter(stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			var ev struct {
				EventID string `json:"event_id"`
			}
			if err := json.Unmarshal(line, &ev); err != nil {
				return err
			}
			b, err := json.Marshal(sink.Result{EventID: ev.EventID, Result: sink.ResultOK})
			if err != nil {
				return err
			}
			out.Write(append(b, '\n'))
		}
		// Flush when no more input is waiting: a batch's answers go out
		// together, and the last one never waits.
		if in.Buffered() == 0 || err != nil {
			if ferr := out.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// httpTarget serves the http sink's protocol with the least a target can
// do: 200 and an empty body (every event ok).
func httpTarget() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/events", func() { _ = srv.Close() }, nil
}

func runSink(ctx context.Context, o Options, name, dir string) (Row, error) {
	row := Row{Sink: name, Events: o.Events}
	tg, skip, err := newTarget(o, name, dir)
	if err != nil || skip != "" {
		row.Skipped = skip
		return row, err
	}
	defer tg.close()
	gate := &gatedSink{open: make(chan struct{})}
	if tg.open == nil {
		gate.tx = sink.StoreSink{}
	}
	ls, err := systest.New(dir, systest.Options{Logger: o.Log, Configure: func(c *topology.Config) {
		if c.Site == "edge1" {
			c.Sink = tg.cfg
		}
	}}, gate.edgeOptions)
	if err != nil {
		return row, err
	}
	defer ls.Close()
	if err := ls.StartAll(ctx); err != nil {
		return row, err
	}
	box := ls.App("edge1")
	if tg.open != nil {
		// The box's own config, defaults filled, as the box would open it.
		s, closeSink, err := tg.open(box, ls.Configs["edge1"].Sink)
		if err != nil {
			return row, err
		}
		defer closeSink()
		gate.inner = s
	}
	if err := publishEvents(ctx, ls.App("l1").ClientURL(), o.Events, o.Size); err != nil {
		return row, err
	}
	// The runner holds its first batch at the gate meanwhile.
	if err := waitBacklog(ctx, box.ClientURL(), ls.Topology.Events.EdgeStream, o.Events); err != nil {
		return row, err
	}
	before := acked(box)
	cpu0 := cputime.Self()
	start := time.Now()
	close(gate.open)
	if err := ctxsleep.Until(ctx, 10*time.Minute, func() (bool, error) { return acked(box)-before >= float64(o.Events), nil }); err != nil {
		return row, fmt.Errorf("drain: %w", err)
	}
	row.Seconds = time.Since(start).Seconds()
	row.CPUPer1k = (cputime.Self() - cpu0).Seconds() / float64(o.Events) * 1000
	row.EPS = float64(o.Events) / row.Seconds
	row.WriteP50, row.WriteP99 = gate.percentiles()
	return row, nil
}

// waitBacklog waits until the edge at url stores n events in stream.
func waitBacklog(ctx context.Context, url, stream string, n int) error {
	enc, ejs, err := jsmsg.Connect(url)
	if err != nil {
		return err
	}
	defer enc.Close()
	if err := ctxsleep.Until(ctx, 10*time.Minute, func() (bool, error) {
		s, err := ejs.Stream(ctx, stream)
		if err != nil {
			return false, err
		}
		return s.CachedInfo().State.LastSeq >= uint64(n), nil
	}); err != nil {
		return fmt.Errorf("backlog did not reach the edge: %w", err)
	}
	return nil
}

// edgeOptions gives edge1 the gate as its sink: in the outbox's
// transaction when it wraps a TxSink.
func (g *gatedSink) edgeOptions(site string) []edge.Option {
	switch {
	case site != "edge1":
		return nil
	case g.tx != nil:
		return []edge.Option{edge.WithTxSink(g)}
	}
	return []edge.Option{edge.WithSink(g)}
}

// gatedSink holds the first write until open is closed, then passes every
// write to inner (or tx) and times it.
type gatedSink struct {
	open  chan struct{}
	inner sink.Sink
	tx    sink.TxSink
	mu    sync.Mutex
	times []time.Duration
}

func (g *gatedSink) Write(ctx context.Context, evs []sink.Event) []error {
	<-g.open
	start := time.Now()
	errs := g.inner.Write(ctx, evs)
	g.record(time.Since(start))
	return errs
}

func (g *gatedSink) WriteTx(tx *bbolt.Tx, evs []sink.Event) error {
	<-g.open
	start := time.Now()
	err := g.tx.WriteTx(tx, evs)
	g.record(time.Since(start))
	return err
}

func (g *gatedSink) record(d time.Duration) {
	g.mu.Lock()
	g.times = append(g.times, d)
	g.mu.Unlock()
}

func (g *gatedSink) percentiles() (p50, p99 time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.times) == 0 {
		return 0, 0
	}
	t := slices.Clone(g.times)
	sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	return t[len(t)*50/100], t[min(len(t)-1, len(t)*99/100)]
}

// publishEvents publishes n events of size bytes at L1, time-ordered ids, with
// at most 1024 PubAcks outstanding.
func publishEvents(ctx context.Context, url string, n, size int) error {
	nc, js, err := jsmsg.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	payload := []byte(`{"pad":"` + strings.Repeat("x", max(0, size-10)) + `"}`)
	return jsmsg.PublishWindowed(ctx, js, n, 1024, func(i int) *nats.Msg {
		m := nats.NewMsg(fmt.Sprintf("events.bench.%d", i%8))
		m.Header.Set(jetstream.MsgIDHeader, uuid.Must(uuid.NewV7()).String())
		m.Data = payload
		return m
	})
}

func acked(box *box.App) float64 {
	mfs, err := box.Metrics().Registry().Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "leafline_messages_acked_total" {
			return counterSum(mf.GetMetric())
		}
	}
	return 0
}

func counterSum(ms []*dto.Metric) float64 {
	s := 0.0
	for _, m := range ms {
		s += m.GetCounter().GetValue()
	}
	return s
}

// Print writes the rows as a table, with each row's rate against the
// store sink's in the same run, and a final `bench sinks …` line.
func Print(w io.Writer, rows []Row) {
	var store float64
	for _, r := range rows {
		if r.Sink == "store" {
			store = r.EPS
		}
	}
	fmt.Fprintf(w, "%-12s %8s %10s %10s %10s %12s %9s\n", "sink", "events", "events/s", "write p50", "write p99", "cpu s/1k ev", "vs store")
	line := "bench sinks"
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(w, "%-12s skipped: %s\n", r.Sink, r.Skipped)
			continue
		}
		ratio := "-"
		if store > 0 {
			ratio = fmt.Sprintf("%.2f", r.EPS/store)
		}
		fmt.Fprintf(w, "%-12s %8d %10.0f %10s %10s %12.3f %9s\n", r.Sink, r.Events, r.EPS,
			r.WriteP50.Round(10*time.Microsecond), r.WriteP99.Round(10*time.Microsecond), r.CPUPer1k, ratio)
		line += fmt.Sprintf(" %s_eps=%.0f", strings.ReplaceAll(r.Sink, "-", "_"), r.EPS)
	}
	fmt.Fprintln(w, line)
}
