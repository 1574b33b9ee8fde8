//go:build linux

package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/internal/jsmsg"
	"github.com/leafline/leafline/publish"
	"github.com/leafline/leafline/systest"
	"github.com/leafline/leafline/topology"
)

type benchEnv struct {
	b      *tb
	ls     *systest.System
	gates  map[string]chan struct{}
	traces map[string]*benchTrace
	nc     map[string]*nats.Conn
	js     map[string]jetstream.JetStream
	closed sync.Once
}

func benchLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newBenchEnv lays out a local system of l1, a hub and edges under dir, the
// edges' filters and sinks as given, every link over transport. Each
// edge's runner waits for env.open.
func newBenchEnv(b *tb, dir string, edges int, filters map[string]string, sink map[string]string, transport string) *benchEnv {
	return newBenchEnvLog(b, dir, edges, filters, sink, transport, benchLogger())
}

// newBenchEnvLog is newBenchEnv with the boxes logging to log.
func newBenchEnvLog(b *tb, dir string, edges int, filters map[string]string, sink map[string]string, transport string, log *slog.Logger) *benchEnv {
	env := &benchEnv{b: b, gates: map[string]chan struct{}{}, traces: map[string]*benchTrace{},
		nc: map[string]*nats.Conn{}, js: map[string]jetstream.JetStream{}}
	hooks := func(site string) []edge.Option {
		g, ok := env.gates[site]
		if !ok {
			return nil
		}
		tr := env.traces[site]
		return []edge.Option{edge.WithRunnerHooks(runner.Hooks{Gate: g, Trace: tr.step, OnBatch: tr.batch})}
	}
	ls, err := systest.New(dir, systest.Options{Edges: edges, Logger: log, UnsignedReceipts: b.o.Unsigned, Insecure: b.o.Insecure, Configure: func(c *topology.Config) {
		c.JetStream.SyncInterval = "2m" // preload only; restart() switches to always
		if s, ok := sink[c.Site]; ok {
			c.Sink.Type = s
		}
		if b.o.Batch > 0 {
			c.Delivery.BatchSize = b.o.Batch
		}
		if b.o.BacklogBatch > 0 {
			c.Delivery.BacklogBatchSize = b.o.BacklogBatch
		}
	}}, hooks)
	if err != nil {
		b.Fatal(err)
	}
	env.ls = ls
	b.Cleanup(env.close)
	for name, f := range filters {
		s, _ := ls.Topology.Site(name)
		s.Filter = f
	}
	if err := SetTransport(ls.Topology, transport); err != nil {
		b.Fatal(err)
	}
	ls.Topology.Compression = b.o.Compression
	return env
}

// validate checks the topology and every box config again, after a phase
// changed them: systest validated them as it laid them out.
func (env *benchEnv) validate() {
	if err := env.ls.Topology.Validate(); err != nil {
		env.b.Fatal(err)
	}
	for _, c := range env.ls.Configs {
		if err := c.Validate(); err != nil {
			env.b.Fatal(err)
		}
	}
}

func (env *benchEnv) startAll() {
	var names []string
	for _, s := range env.ls.Topology.Sites {
		names = append(names, s.Name)
	}
	env.startSites(names...)
}

// startOpen checks the configs again, starts every box, waits until
// every link is up and opens every edge's runner.
func (env *benchEnv) startOpen() {
	env.validate()
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool {
		for _, s := range env.ls.Topology.Sites {
			if s.Upstream != "" && !env.connected(s.Name)() {
				return false
			}
		}
		return true
	})
	for _, e := range env.ls.Topology.Edges() {
		env.open(e.Name)
	}
}

// startSites starts the named boxes, in order, each edge's runner gated
// (open), and connects to each.
func (env *benchEnv) startSites(names ...string) {
	for _, e := range env.ls.Topology.Edges() {
		if slices.Contains(names, e.Name) {
			env.gates[e.Name] = make(chan struct{})
			env.traces[e.Name] = &benchTrace{}
		}
	}
	// A fleet of in-process edges starts one server after another.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+time.Duration(len(names))*10*time.Second)
	defer cancel()
	for _, name := range names {
		if _, err := env.ls.Start(ctx, name); err != nil {
			env.b.Fatal(err)
		}
	}
	for _, name := range names {
		if nc := env.nc[name]; nc != nil {
			nc.Close()
		}
		nc, err := nats.Connect(env.ls.App(name).ClientURL(), nats.MaxReconnects(-1))
		if err != nil {
			env.b.Fatal(err)
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
		if err != nil {
			env.b.Fatal(err)
		}
		env.nc[name], env.js[name] = nc, js
	}
}

// restart stops every box and starts it again with the given sync interval
// (runner gates closed again).
func (env *benchEnv) restart(sync string) {
	sites := env.ls.Topology.Sites
	for i := len(sites) - 1; i >= 0; i-- {
		if err := env.ls.Stop(sites[i].Name); err != nil {
			env.b.Fatal(err)
		}
	}
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = sync
	}
	env.startAll()
}

func (env *benchEnv) close() {
	env.closed.Do(func() {
		for _, nc := range env.nc {
			nc.Close()
		}
		if env.b.ctx.Err() != nil {
			// A stopped bench removes the data next: every box stops at
			// once, without a drain, within the bench's 5 s.
			var wg sync.WaitGroup
			for _, s := range env.ls.Topology.Sites {
				wg.Go(func() { env.ls.Kill(s.Name) })
			}
			wg.Wait()
		}
		env.ls.Close()
	})
}

func (env *benchEnv) open(edge string) {
	close(env.gates[edge])
}

// count is how many messages a stream has stored so far: its last
// sequence, since the streams after L1A delete what the next hop took.
func (env *benchEnv) count(site, stream string) func() uint64 {
	return func() uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := env.js[site].Stream(ctx, stream)
		if err != nil {
			return 0
		}
		return s.CachedInfo().State.LastSeq
	}
}

func (env *benchEnv) applied() uint64 {
	return leafline.Completions(env.ls.App("l1")).Stats().Applied
}

// originDone counts the origin messages the L1 completion service's origin
// tracker has finished with.
func (env *benchEnv) originDone() uint64 {
	st := leafline.Completions(env.ls.App("l1")).Stats()
	return st.OriginTracked + st.OriginKnown + st.OriginSkipped
}

func (env *benchEnv) waitUntil(what string, d time.Duration, cond func() bool) {
	if err := ctxsleep.Until(env.b.ctx, d, func() (bool, error) { return cond(), nil }); err != nil {
		env.b.Fatalf("bench: waiting for %s: %v", what, err)
	}
}

// waitFor is waitUntil that reports a timeout rather than ending the
// run: false once d has passed without cond. A stopped run still ends.
func (env *benchEnv) waitFor(d time.Duration, cond func() bool) bool {
	err := ctxsleep.Until(env.b.ctx, d, func() (bool, error) { return cond(), nil })
	if err != nil && env.b.ctx.Err() != nil {
		env.b.Fatal("bench: stopped: ", context.Cause(env.b.ctx))
	}
	return err == nil
}

func (env *benchEnv) connected(site string) func() bool {
	return func() bool { return env.ls.App(site).UpstreamConnected() }
}

// benchPublish publishes n events (subject and id from i) with a bounded
// window of outstanding PubAcks; at, if set, records each publish time.
func benchPublish(ctx context.Context, js jetstream.JetStream, n int, payload []byte, subj, id func(i int) string, at []time.Time) error {
	return jsmsg.PublishWindowed(ctx, js, n, 2048, func(i int) *nats.Msg {
		m := nats.NewMsg(subj(i))
		m.Header.Set(jetstream.MsgIDHeader, id(i))
		m.Data = payload
		if at != nil {
			at[i] = time.Now()
		}
		return m
	})
}

// benchPublishBatched publishes n events as `leafline publish --batch`
// does: atomic batches of publish.DefaultBatch, each event's id as
// Nats-Msg-Id; at[i] is when event i's batch was sent.
func benchPublishBatched(ctx context.Context, js jetstream.JetStream, n int, payload []byte, subj, id func(i int) string, at []time.Time) error {
	p, err := publish.New(publish.Config{JS: js, Stream: "L1A"})
	if err != nil {
		return err
	}
	evs := make([]publish.Event, 0, publish.DefaultBatch)
	for start := 0; start < n; start += publish.DefaultBatch {
		evs = evs[:0]
		now := time.Now()
		for i := start; i < min(n, start+publish.DefaultBatch); i++ {
			evs = append(evs, publish.Event{ID: id(i), Subject: subj(i), Data: payload})
			if at != nil {
				at[i] = now
			}
		}
		if _, err := p.Publish(ctx, evs); err != nil {
			return err
		}
	}
	return nil
}

func benchPayload(n int) []byte {
	p := []byte(`{"bench":"` + strings.Repeat("x", max(0, n-13)) + `"}`)
	return p[:min(len(p), max(n, 0))]
}

// benchID names event i of a phase: unique and deterministic. By default
// in random order like UUIDv4 ids (a bijective 64-bit mix of i), so that
// the store sink's and the outbox's B+trees see random inserts; with
// Options.IDs "time" like UUIDv7 ids minted at 10 a millisecond (the time,
// a counter, then random bits), which they append.
func (b *tb) id(prefix string) func(int) string {
	if b.o.IDs == "time" {
		return func(i int) string {
			ms, r := uint64(0x019ad3c00000)+uint64(i)/10, benchMix(uint64(i))
			return fmt.Sprintf("%s-%08x-%04x-7%03x-%04x-%012x", prefix, ms>>16, ms&0xffff, uint64(i)%10, 0x8000|(r>>48)&0x3fff, r&0xffffffffffff)
		}
	}
	return func(i int) string { return fmt.Sprintf("%s-%016x", prefix, benchMix(uint64(i))) }
}

// benchMix is splitmix64's finalizer: a bijection on uint64.
func benchMix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
