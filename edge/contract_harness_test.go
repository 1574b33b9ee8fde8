package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/logx"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

type dlqMode int

const (
	dlqCreate  dlqMode = iota // the appliance's DLQ stream, when dead_letter.enabled
	dlqMissing                // dead_letter.enabled but no stream captures the subject
	dlqFull                   // MaxMsgs 1, DiscardNew, already holding one record
)

type contractOpts struct {
	configure func(*topology.Config)
	// script: per event_id, the sink's outcome for its 1st, 2nd, …
	// write; the last one repeats. Missing: success.
	script map[string][]sinkOutcome
	// hold, if set, runs inside the sink's Write for each event.
	hold func(ev sink.Event)
	// txSink runs the built-in StoreSink inside the outbox transaction.
	txSink bool
	dlq    dlqMode
	// noReceiptsStream: the receipts stream does not exist at start.
	noReceiptsStream bool
	wrapPub          func(outbox.Publisher) outbox.Publisher
	// dial, if set, returns the URL the runner connects to (a proxy);
	// otherwise it connects in-process.
	dial     func(t *testing.T, srv *server.Server) string
	natsOpts []nats.Option
	// onStep runs synchronously on the runner's goroutine at each step.
	onStep func(f *contractSite, s ctStep)
	// before runs after the messages are published, before the runner's
	// first fetch.
	before func(t *testing.T, f *contractSite)
}

type sinkOutcome int

const (
	sinkOK sinkOutcome = iota
	sinkTemp
	sinkPerm
)

// ctStep is one recorded step of the contract.
type ctStep struct {
	name      string
	seq       uint64 // stream sequence in the edge stream
	delivered uint64
	eventID   string
	at        time.Time
}

func (s ctStep) String() string { return fmt.Sprintf("%s@%d", s.name, s.delivered) }

// scriptSink is the suite's Sink: it fails on command and is idempotent by
// event_id, counting durable records so that a test can prove that a
// redelivery never creates a second one.
type scriptSink struct {
	mu      sync.Mutex
	script  map[string][]sinkOutcome
	hold    func(sink.Event)
	calls   map[string]int
	records map[string]int // durable records per event_id (must stay <= 1)
	dups    int            // successful writes of an already-stored event
	batches [][]string     // event_ids of each Write call
}

func newScriptSink(script map[string][]sinkOutcome, hold func(sink.Event)) *scriptSink {
	return &scriptSink{script: script, hold: hold, calls: map[string]int{}, records: map[string]int{}}
}

func (s *scriptSink) Write(ctx context.Context, evs []sink.Event) []error {
	errs := make([]error, len(evs))
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
		if s.hold != nil {
			s.hold(ev)
		}
		s.mu.Lock()
		n := s.calls[ev.ID]
		s.calls[ev.ID]++
		out := sinkOK
		if sc := s.script[ev.ID]; len(sc) > 0 {
			out = sc[min(n, len(sc)-1)]
		}
		switch out {
		case sinkOK:
			if s.records[ev.ID] == 0 {
				s.records[ev.ID] = 1
			} else {
				s.dups++
			}
		case sinkTemp:
			errs[i] = errors.New("injected temporary failure")
		case sinkPerm:
			errs[i] = sink.Permanent(errors.New("injected permanent failure"))
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.batches = append(s.batches, ids)
	s.mu.Unlock()
	return errs
}

func (s *scriptSink) recordsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records[id]
}

func (s *scriptSink) callsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

func (s *scriptSink) writeBatches() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

// contractSite is one edge site's JetStream assets on an embedded server,
// the real runner, and what the test observed.
type contractSite struct {
	t        *testing.T
	cfg      *topology.Config
	srv      *server.Server
	storeDir string
	nc       *nats.Conn          // the runner's connection
	client   jetstream.JetStream // the test's own connection
	cnc      *nats.Conn
	ob       *outbox.Outbox
	// ro is the runner's options until start builds it into r; a test
	// may adjust them before start.
	ro      runner.Options
	r       *runner.Runner
	pub     outbox.Publisher // the runner's first receipt publisher
	sink    *scriptSink
	metrics *metrics
	onStep  func(f *contractSite, s ctStep)

	mu    sync.Mutex
	steps []ctStep
	advs  map[string][]ctAdvisory // advisory kind → advisories
	wire  []ctWire                // acknowledgements as the server received them

	started bool
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// ctWire is one acknowledgement seen on the wire: a message on the
// consumer's $JS.ACK subject, as the server receives it.
type ctWire struct {
	seq, delivered uint64
	body           string
	request        bool // sent with a reply subject: the server answers it
}

// kind is the acknowledgement as the trace names it.
func (w ctWire) kind() string {
	switch {
	case w.body == "+ACK" && w.request:
		return "double_ack"
	case w.body == "+ACK":
		return "ack"
	case w.body == "+TERM" && w.request:
		return "confirmed_term"
	case strings.HasPrefix(w.body, "+TERM"):
		return "term"
	case strings.HasPrefix(w.body, "-NAK"):
		return "nak"
	case w.body == "+WPI":
		return "in_progress"
	}
	return "unknown:" + w.body
}

// nakDelay is the delay a NAK asked for (0: none).
func (w ctWire) nakDelay() time.Duration {
	var d struct {
		Delay int64 `json:"delay"`
	}
	if rest, ok := strings.CutPrefix(w.body, "-NAK "); ok && json.Unmarshal([]byte(rest), &d) == nil {
		return time.Duration(d.Delay)
	}
	return 0
}

// parseAckSubject finds the stream sequence and delivery count in an ACK
// subject ($JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.… or the v2
// form with domain and account hash first).
func parseAckSubject(subj string) (seq, delivered uint64, ok bool) {
	tok := strings.Split(subj, ".")
	for i := 2; i+3 < len(tok); i++ {
		if tok[i] == ctStream && tok[i+1] == ctConsumer {
			d, err1 := strconv.ParseUint(tok[i+2], 10, 64)
			s, err2 := strconv.ParseUint(tok[i+3], 10, 64)
			return s, d, err1 == nil && err2 == nil
		}
	}
	return 0, 0, false
}

type ctAdvisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

const (
	ctStream   = "L2A"
	ctConsumer = "leafline-sink"
	ctReceipts = "RE"
	ctSite     = "edge1"
)

// contractConfig is a validated edge config for site edge1 of a
// three-site topology (l1 and hub are never started).
func contractConfig(t *testing.T, dir string, configure func(*topology.Config)) *topology.Config {
	t.Helper()
	return siteConfig(t, ctSite, dir, [2]int{7422, 7423}, func(cfg *topology.Config) {
		// Fast defaults for tests; cases override them.
		cfg.Delivery.Retry.Jitter = "none"
		cfg.Delivery.Retry.Mode = "fixed"
		cfg.Delivery.Retry.BackoffMS = 100
		cfg.Delivery.Retry.BackoffMaxMS = 100
		cfg.Delivery.BatchTimeoutMS = 20
		if configure != nil {
			configure(cfg)
		}
	})
}

// siteConfig is a validated config of site (l1, hub or edge1) of a
// three-site topology whose l1 and hub take leafnodes on leafPorts.
func siteConfig(t *testing.T, site, dir string, leafPorts [2]int, configure func(*topology.Config)) *topology.Config {
	t.Helper()
	top := &topology.Topology{Sites: []topology.Site{
		{Name: "l1", Role: topology.RoleL1, Leafnode: topology.SiteLeafnode{Listen: fmt.Sprintf("127.0.0.1:%d", leafPorts[0])}},
		{Name: "hub", Role: topology.RoleHub, Upstream: "l1", Leafnode: topology.SiteLeafnode{Listen: fmt.Sprintf("127.0.0.1:%d", leafPorts[1])}},
		{Name: ctSite, Role: topology.RoleEdge, Upstream: "hub"},
	}}
	top.SetDefaults()
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := &topology.Config{
		TopologyFile: "topology.json",
		Site:         site,
		DataDir:      dir,
		NATS:         topology.NATSConfig{Listen: "127.0.0.1:0"},
		Ops:          topology.OpsConfig{Listen: "127.0.0.1:0"},
		Topology:     top,
	}
	if configure != nil {
		configure(cfg)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func ctLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(logx.TestWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startContractServer starts an embedded JetStream server in dir.
func startContractServer(t *testing.T, dir string, port int) *server.Server {
	t.Helper()
	return jstest.Run(t, &server.Options{
		ServerName:      ctSite,
		Host:            "127.0.0.1",
		Port:            port,
		JetStream:       true,
		JetStreamDomain: ctSite,
		StoreDir:        dir,
		NoLog:           true,
	})
}

// newContractSite builds the site and its runner; the runner waits for
// f.start (or f.run) before its first fetch.
func newContractSite(t *testing.T, o contractOpts) *contractSite {
	t.Helper()
	dir := t.TempDir()
	cfg := contractConfig(t, dir, o.configure)
	srv := startContractServer(t, dir+"/jetstream", server.RANDOM_PORT)
	f := &contractSite{t: t, cfg: cfg, srv: srv, storeDir: dir + "/jetstream", onStep: o.onStep, advs: map[string][]ctAdvisory{},
		done: make(chan error, 1)}

	// The test's own connection: creates the assets, publishes, inspects.
	cnc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	f.cnc = cnc
	if f.client, err = jetstream.New(cnc); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"MSG_NAKED", "MSG_TERMINATED", "MAX_DELIVERIES"} {
		kind := kind
		_, err := cnc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER."+kind+"."+ctStream+"."+ctConsumer, func(m *nats.Msg) {
			var a ctAdvisory
			if json.Unmarshal(m.Data, &a) == nil {
				f.mu.Lock()
				f.advs[kind] = append(f.advs[kind], a)
				f.mu.Unlock()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = cnc.Subscribe("$JS.ACK.>", func(m *nats.Msg) {
		seq, d, ok := parseAckSubject(m.Subject)
		if !ok {
			return
		}
		f.mu.Lock()
		f.wire = append(f.wire, ctWire{seq: seq, delivered: d, body: string(m.Data), request: m.Reply != ""})
		f.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cnc.Flush(); err != nil {
		t.Fatal(err)
	}

	// The site's jsplan.Plan, as the appliance derives it, minus the links: the
	// edge events stream takes its subjects directly instead of sourcing
	// them from a hub, and no source consumer is served upstream.
	site, _ := cfg.Topology.Site(ctSite)
	full := jsplan.SitePlan(cfg, site)
	var p jsplan.Plan
	for _, sc := range full.Streams {
		switch {
		case sc.Name == cfg.Topology.Events.EdgeStream:
			sc.Sources = nil
			sc.Subjects = cfg.Topology.Events.Subjects
		case sc.Name == cfg.Topology.Receipts.EdgeStream && o.noReceiptsStream:
			continue
		case cfg.DeadLetter.Enabled && sc.Name == cfg.DeadLetter.Stream:
			switch o.dlq {
			case dlqMissing:
				continue
			case dlqFull:
				sc.MaxMsgs = 1
				sc.Discard = jetstream.DiscardNew
			}
		}
		p.Streams = append(p.Streams, sc)
	}
	p.Consumers = []jsplan.ConsumerPlan{{Stream: cfg.Topology.Events.EdgeStream, Config: jsplan.SinkConsumerConfig(cfg)}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := jsplan.Reconcile(ctx, f.client, p); err != nil {
		t.Fatal(err)
	}
	if cfg.DeadLetter.Enabled && o.dlq == dlqFull {
		m := nats.NewMsg(cfg.DeadLetter.Subject)
		m.Header.Set(jetstream.MsgIDHeader, "filler")
		m.Data = []byte(`{"filler":true}`)
		if _, err := f.client.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	// The runner, wired as App.startEdge wires it.
	url := ""
	nopts := append([]nats.Option{nats.Name("leafline-" + ctSite), nats.MaxReconnects(-1)}, o.natsOpts...)
	if o.dial != nil {
		url = o.dial(t, srv)
	} else {
		nopts = append(nopts, nats.InProcessServer(srv))
	}
	if f.nc, err = nats.Connect(url, nopts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.nc.Close)
	js, err := jetstream.New(f.nc)
	if err != nil {
		t.Fatal(err)
	}
	if f.ob, err = outbox.Open(dir+"/outbox.db", outbox.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.ob.Close() })
	cons, err := js.Consumer(ctx, cfg.Topology.Events.EdgeStream, cfg.Delivery.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	progress, err := inProgressInterval(cfg.Delivery, cons.CachedInfo().Config.AckWait)
	if err != nil {
		t.Fatal(err)
	}
	f.metrics = newMetrics(box.NewMetrics(ctSite, "edge"))
	f.pub = &receiptPublisher{js: js}
	if o.wrapPub != nil {
		f.pub = o.wrapPub(f.pub)
	}
	f.ro = runner.Options{
		Config:     cfg,
		Site:       ctSite,
		NC:         f.nc,
		JS:         js,
		Progress:   progress,
		Consumer:   cons,
		Outbox:     f.ob,
		Publishers: []outbox.Publisher{f.pub},
		Metrics:    f.metrics.runner(),
		Log:        ctLogger(t).With("component", "runner"),
		Hooks:      runner.Hooks{Trace: f.trace},
	}
	if o.txSink {
		f.ro.TxSink = sink.StoreSink{}
	} else {
		f.sink = newScriptSink(o.script, o.hold)
		f.ro.Sink = f.sink
	}
	t.Cleanup(f.stop)
	return f
}
