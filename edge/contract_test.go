package edge

// The delivery-contract suite (issue 3). Every case runs the real sink
// runner against a real embedded nats-server with JetStream, a real bbolt
// outbox and the real receipt publisher, records the exact order of the
// contract's steps per message and delivery through the runner's trace hook,
// and then checks server-side facts: the consumer's ack state, the advisories
// the server emitted (NAK, Term, max deliveries), and what the receipts and
// DLQ streams hold. Faults are injected by real means (a missing or full
// stream, created or enlarged from a trace hook) or through the runner's
// publisher hook. Only the sink is a test double: it fails on command.

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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipts"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// ---------------------------------------------------------------------------
// The fixture: one edge site, no links.

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
	metrics *Metrics
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
	top := &topology.Topology{Sites: []topology.Site{
		{Name: "l1", Role: topology.RoleL1, Leafnode: topology.SiteLeafnode{Listen: "127.0.0.1:7422"}},
		{Name: "hub", Role: topology.RoleHub, Upstream: "l1", Leafnode: topology.SiteLeafnode{Listen: "127.0.0.1:7423"}},
		{Name: ctSite, Role: topology.RoleEdge, Upstream: "hub"},
	}}
	top.SetDefaults()
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := &topology.Config{
		TopologyFile: "topology.json",
		Site:         ctSite,
		DataDir:      dir,
		NATS:         topology.NATSConfig{Listen: "127.0.0.1:0"},
		Ops:          topology.OpsConfig{Listen: "127.0.0.1:0"},
		Topology:     top,
	}
	// Fast defaults for tests; cases override them.
	cfg.Delivery.Retry.Jitter = "none"
	cfg.Delivery.Retry.Mode = "fixed"
	cfg.Delivery.Retry.BackoffMS = 100
	cfg.Delivery.Retry.BackoffMaxMS = 100
	cfg.Delivery.BatchTimeoutMS = 20
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
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startContractServer starts an embedded JetStream server in dir.
func startContractServer(t *testing.T, dir string, port int) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName:      ctSite,
		Host:            "127.0.0.1",
		Port:            port,
		JetStream:       true,
		JetStreamDomain: ctSite,
		StoreDir:        dir,
		NoSigs:          true,
		NoLog:           true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("embedded server not ready")
	}
	return s
}

// newContractSite builds the site and its runner; the runner waits for
// f.start (or f.run) before its first fetch.
func newContractSite(t *testing.T, o contractOpts) *contractSite {
	t.Helper()
	dir := t.TempDir()
	cfg := contractConfig(t, dir, o.configure)
	srv := startContractServer(t, dir+"/jetstream", server.RANDOM_PORT)
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
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

	// The site's plan, as the appliance derives it, minus the links: the
	// edge events stream takes its subjects directly instead of sourcing
	// them from a hub, and no source consumer is served upstream.
	site, _ := cfg.Topology.Site(ctSite)
	full := sitePlan(cfg, site)
	var p plan
	for _, sc := range full.streams {
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
		p.streams = append(p.streams, sc)
	}
	p.consumers = []consumerPlan{{stream: cfg.Topology.Events.EdgeStream, cfg: sinkConsumerConfig(cfg)}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := reconcile(ctx, f.client, p); err != nil {
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
	f.metrics = newMetrics(ctSite, "edge")
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

// trace records a step of the contract that the runner reports.
func (f *contractSite) trace(step, eventID string, meta *jetstream.MsgMetadata) {
	s := ctStep{name: step, seq: meta.Sequence.Stream, delivered: meta.NumDelivered, eventID: eventID, at: time.Now()}
	f.mu.Lock()
	f.steps = append(f.steps, s)
	f.mu.Unlock()
	if f.onStep != nil {
		f.onStep(f, s)
	}
}

// receiptRecord is the receipt record the runner writes for eventID.
func (f *contractSite) receiptRecord(eventID string, status receipts.Status, reason string) (outbox.Record, error) {
	r, err := runner.New(f.ro)
	if err != nil {
		return outbox.Record{}, err
	}
	return r.ReceiptRecord(eventID, status, reason)
}

// start builds the runner from f.ro and lets it fetch.
func (f *contractSite) start() {
	f.t.Helper()
	r, err := runner.New(f.ro)
	if err != nil {
		f.t.Fatal(err)
	}
	f.r, f.started = r, true
	rctx, rcancel := context.WithCancel(context.Background())
	f.cancel = rcancel
	go func() { f.done <- r.Run(rctx) }()
}

// stop cancels the runner and waits for run to return; a batch in flight
// finishes first.
func (f *contractSite) stop() {
	if f.stopped || !f.started {
		return
	}
	f.stopped = true
	f.cancel()
	select {
	case err := <-f.done:
		if err != nil {
			f.t.Errorf("runner returned %v", err)
		}
	case <-time.After(30 * time.Second):
		f.t.Error("runner did not stop within 30s")
	}
}

// ctMsg is a message published into the edge stream.
type ctMsg struct {
	id      string // Nats-Msg-Id header (the event_id by default); "" means none
	subject string // default "events.test"
	data    []byte // default {"k":1}
	header  map[string]string
}

func (f *contractSite) publish(msgs ...ctMsg) []uint64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seqs := make([]uint64, len(msgs))
	for i, cm := range msgs {
		subj := cm.subject
		if subj == "" {
			subj = "events.test"
		}
		m := nats.NewMsg(subj)
		if cm.id != "" {
			m.Header.Set(jetstream.MsgIDHeader, cm.id)
		}
		for k, v := range cm.header {
			m.Header.Set(k, v)
		}
		m.Data = cm.data
		if m.Data == nil {
			m.Data = []byte(`{"k":1}`)
		}
		ack, err := f.client.PublishMsg(ctx, m)
		if err != nil {
			f.t.Fatalf("publish %d: %v", i, err)
		}
		if ack.Duplicate {
			f.t.Fatalf("publish %d: stream reported a duplicate", i)
		}
		seqs[i] = ack.Sequence
	}
	return seqs
}

// stepsOf returns the recorded steps of one stream message.
func (f *contractSite) stepsOf(seq uint64) []ctStep {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ctStep
	for _, s := range f.steps {
		if s.seq == seq {
			out = append(out, s)
		}
	}
	return out
}

// stepNames renders steps as "step@delivery". A "dlq_recorded" step (a
// runner that finds, in its outbox, that an earlier delivery's DLQ record
// was PubAck'ed, and skips the publish) is rendered as the publish and
// PubAck it stands for, so that expectations hold either way.
func stepNames(ss []ctStep) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if s.name == "dlq_recorded" {
			out = append(out, fmt.Sprintf("dlq_publish@%d", s.delivered), fmt.Sprintf("dlq_puback@%d", s.delivered))
			continue
		}
		out = append(out, s.String())
	}
	return out
}

// wireOf returns the acknowledgements of one stream message, in the order
// the server received them; InProgress heartbeats only if withWPI.
func (f *contractSite) wireOf(seq uint64, withWPI bool) []ctWire {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ctWire
	for _, w := range f.wire {
		if w.seq == seq && (withWPI || w.kind() != "in_progress") {
			out = append(out, w)
		}
	}
	return out
}

func (f *contractSite) advisories(kind string) []ctAdvisory {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.advs[kind])
}

func (f *contractSite) advisoriesFor(kind string, seq uint64) int {
	n := 0
	for _, a := range f.advisories(kind) {
		if a.StreamSeq == seq {
			n++
		}
	}
	return n
}

func (f *contractSite) consumerInfo() *jetstream.ConsumerInfo {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := f.client.Consumer(ctx, ctStream, ctConsumer)
	if err != nil {
		f.t.Fatal(err)
	}
	return c.CachedInfo()
}

// streamMsgCount is the number of messages in a stream (0 if it does not exist).
func (f *contractSite) streamMsgCount(name string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := f.client.Stream(ctx, name)
	if err != nil {
		return 0
	}
	return s.CachedInfo().State.Msgs
}

// streamRawMsgs returns every message of a stream, in order.
func (f *contractSite) streamRawMsgs(name string) []*jetstream.RawStreamMsg {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := f.client.Stream(ctx, name)
	if err != nil {
		f.t.Fatalf("stream %s: %v", name, err)
	}
	st := s.CachedInfo().State
	var out []*jetstream.RawStreamMsg
	for seq := st.FirstSeq; seq <= st.LastSeq && st.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			f.t.Fatalf("stream %s seq %d: %v", name, seq, err)
		}
		out = append(out, m)
	}
	return out
}

// dlqRecords decodes every DLQ record the runner wrote (the filler of a
// "full" DLQ stream is skipped).
func (f *contractSite) dlqRecords() []runner.DLQRecord {
	f.t.Helper()
	var out []runner.DLQRecord
	for _, m := range f.streamRawMsgs(f.cfg.DeadLetter.Stream) {
		if m.Header.Get(jetstream.MsgIDHeader) == "filler" {
			continue
		}
		if want := "leafline.dlq." + ctSite; m.Subject != want {
			f.t.Errorf("DLQ record on subject %q, want %q", m.Subject, want)
		}
		r, err := runner.DecodeDLQRecord(m.Data)
		if err != nil {
			f.t.Fatalf("DLQ record %d: %v", m.Sequence, err)
		}
		if got, want := m.Header.Get(jetstream.MsgIDHeader), fmt.Sprintf("dlq-%s-%s-%d", ctSite, r.Stream, r.StreamSeq); got != want {
			f.t.Errorf("DLQ record Nats-Msg-Id %q, want %q", got, want)
		}
		out = append(out, r)
	}
	return out
}

// receiptsInStream decodes every receipt in the edge receipts stream.
func (f *contractSite) receiptsInStream() []receipts.Receipt {
	f.t.Helper()
	var out []receipts.Receipt
	for _, m := range f.streamRawMsgs(ctReceipts) {
		r, err := receipts.Decode(m.Data)
		if err != nil {
			f.t.Fatalf("receipt %d: %v", m.Sequence, err)
		}
		if want := f.cfg.Topology.ReceiptSubject(ctSite, string(r.Status)); m.Subject != want {
			f.t.Errorf("receipt on subject %q, want %q", m.Subject, want)
		}
		if m.Header.Get(jetstream.MsgIDHeader) != r.MsgID() {
			f.t.Errorf("receipt Nats-Msg-Id %q, want %q", m.Header.Get(jetstream.MsgIDHeader), r.MsgID())
		}
		out = append(out, r)
	}
	return out
}

func (f *contractSite) outboxStats() outbox.Stats {
	f.t.Helper()
	st, err := f.ob.Stats()
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// ---------------------------------------------------------------------------
// Expected step sequences.

var (
	stepsOK     = []string{"sink_commit", "outbox_commit", "receipt_publish", "receipt_puback"}
	stepsDLQ    = []string{"dlq_publish", "dlq_puback", "outbox_commit", "receipt_publish", "receipt_puback"}
	stepsDLQNoR = []string{"dlq_publish", "dlq_puback"} // no event_id: no receipt
)

// at tags steps with a delivery count: at(2, "nak") is "nak@2".
func at(d int, parts ...any) []string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			out = append(out, fmt.Sprintf("%s@%d", v, d))
		case []string:
			for _, s := range v {
				out = append(out, fmt.Sprintf("%s@%d", s, d))
			}
		default:
			panic(fmt.Sprintf("at: %T", p))
		}
	}
	return out
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var finalSteps = map[string]bool{"ack": true, "double_ack": true, "term": true, "confirmed_term": true, "nak": true, "leave": true}

// checkContractInvariants checks the rules of issue 3 that must hold for
// every delivery of every message, whatever the case.
func checkContractInvariants(t *testing.T, label string, steps []ctStep) {
	t.Helper()
	var order []uint64
	by := map[uint64][]string{}
	for _, s := range steps {
		if _, ok := by[s.delivered]; !ok {
			order = append(order, s.delivered)
		}
		if s.name == "dlq_recorded" {
			by[s.delivered] = append(by[s.delivered], "dlq_publish", "dlq_puback")
			continue
		}
		by[s.delivered] = append(by[s.delivered], s.name)
	}
	for _, d := range order {
		names := by[d]
		idx := func(n string) int { return slices.Index(names, n) }
		has := func(n string) bool { return idx(n) >= 0 }
		before := func(a, b string) bool { return has(a) && has(b) && idx(a) < idx(b) }
		fail := func(format string, args ...any) {
			t.Errorf("%s delivery %d %v: %s", label, d, names, fmt.Sprintf(format, args...))
		}
		var finals []string
		for _, n := range names {
			if finalSteps[n] {
				finals = append(finals, n)
			}
		}
		if len(finals) == 0 {
			continue // still in flight (or abandoned by a stopped runner)
		}
		if len(finals) != 1 {
			fail("want exactly one final action, got %v", finals)
			continue
		}
		final := finals[0]
		if names[len(names)-1] != final {
			fail("the final action %s is not the last step", final)
		}
		if has("receipt_publish") && !before("outbox_commit", "receipt_publish") {
			fail("receipt published before its outbox commit")
		}
		if has("receipt_puback") && !before("receipt_publish", "receipt_puback") {
			fail("receipt PubAck without a publish")
		}
		if has("dlq_puback") && !before("dlq_publish", "dlq_puback") {
			fail("DLQ PubAck without a publish")
		}
		if has("dlq_puback") && has("outbox_commit") && !before("dlq_puback", "outbox_commit") {
			fail("dead_lettered receipt committed before the DLQ PubAck")
		}
		if has("sink_commit") && has("outbox_commit") && !before("sink_commit", "outbox_commit") {
			fail("outbox commit before the sink commit")
		}
		switch final {
		case "term", "confirmed_term":
			if has("sink_commit") {
				fail("AckTerm after a successful sink write")
			}
			if !before("dlq_puback", final) {
				fail("AckTerm before (or without) the DLQ PubAck")
			}
			if has("receipt_publish") && !has("receipt_puback") {
				fail("AckTerm without the dead_lettered receipt's PubAck")
			}
		case "ack", "double_ack":
			if !has("sink_commit") && !has("dlq_puback") {
				fail("ACK without a durable sink commit or a DLQ PubAck")
			}
			if has("sink_commit") && !has("outbox_commit") {
				fail("ACK of a sink commit without its outbox commit")
			}
			if has("receipt_publish") && !has("receipt_puback") {
				fail("ACK without the receipt PubAck")
			}
			if has("dlq_publish") && !has("dlq_puback") {
				fail("ACK although the DLQ publish failed")
			}
		}
	}
}

// ---------------------------------------------------------------------------
// The suite.

type contractCase struct {
	name string
	opts contractOpts
	msgs []ctMsg
	// want is, per message, its exact steps ("step@delivery").
	want [][]string
	// pending is the consumer's NumAckPending once the case has settled;
	// -1 skips the check.
	pending int
	check   func(t *testing.T, f *contractSite, seqs []uint64)
}

func ids(n int, prefix string) []ctMsg {
	out := make([]ctMsg, n)
	for i := range out {
		out[i] = ctMsg{id: fmt.Sprintf("%s-%d", prefix, i)}
	}
	return out
}

func repeat(n int, steps []string) [][]string {
	out := make([][]string, n)
	for i := range out {
		out[i] = steps
	}
	return out
}

func TestContract(t *testing.T) {
	dlqOn := func(c *topology.Config) { c.DeadLetter.Enabled = true }
	confirm := func(c *topology.Config) { c.Delivery.AckConfirmation.Enabled = true }
	term := func(c *topology.Config) { c.DeadLetter.Enabled = true; c.DeadLetter.AckTermAfterPub = true }
	all := func(fs ...func(*topology.Config)) func(*topology.Config) {
		return func(c *topology.Config) {
			for _, f := range fs {
				f(c)
			}
		}
	}
	jsonID := func(c *topology.Config) { c.EventID.Header = ""; c.EventID.JSONField = "event_id" }
	fixedBackoff := func(ms int) func(*topology.Config) {
		return func(c *topology.Config) {
			c.Delivery.Retry.Mode, c.Delivery.Retry.Jitter = "fixed", "none"
			c.Delivery.Retry.BackoffMS, c.Delivery.Retry.BackoffMaxMS = ms, ms
		}
	}
	ackWait1s := func(c *topology.Config) { c.Delivery.AckWait = topology.Duration(time.Second) }
	perm := []sinkOutcome{sinkPerm}
	temp := []sinkOutcome{sinkTemp}

	cases := []contractCase{
		// ---- success: ordinary ACK only after the outbox commit and the receipt PubAck
		{
			name: "success_ordinary_ack",
			msgs: ids(1, "ok"),
			want: [][]string{at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ci := f.consumerInfo()
				if ci.AckFloor.Stream != seqs[0] || ci.NumRedelivered != 0 {
					t.Errorf("ack floor %d redelivered %d, want %d and 0", ci.AckFloor.Stream, ci.NumRedelivered, seqs[0])
				}
				rs := f.receiptsInStream()
				if len(rs) != 1 || rs[0].EventID != "ok-0" || rs[0].Status != receipts.StatusProcessed || rs[0].Processor != ctSite {
					t.Errorf("receipts %+v", rs)
				}
				if st := f.outboxStats(); st.Pending != 0 || st.Published != 1 {
					t.Errorf("outbox %+v, want 1 published", st)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 1, "processed": 1, "nacked": 0, "terminated": 0, "receiptsPublished": 1, "ackConfAttempts": 0})
			},
		},
		{
			name: "success_batch_one_receipt_batch",
			msgs: ids(8, "b"),
			want: repeat(8, at(1, stepsOK, "ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if b := f.sink.writeBatches(); len(b) != 1 || len(b[0]) != 8 {
					t.Errorf("sink batches %v, want one batch of 8", b)
				}
				if n := f.streamMsgCount(ctReceipts); n != 8 {
					t.Errorf("receipts stream holds %d, want 8", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 8, "receiptsPublished": 8, "fetched": 8})
			},
		},
		{
			name: "success_confirmed_ack",
			opts: contractOpts{configure: confirm},
			msgs: ids(3, "c"),
			want: repeat(3, at(1, stepsOK, "double_ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"acked": 3, "ackConfAttempts": 3, "ackConfSuccesses": 3, "ackConfTimeouts": 0, "ackConfFailures": 0, "ackConfUnsupported": 0})
				if n := ctHistCount(t, f.metrics.ackConfSeconds); n != 3 {
					t.Errorf("ack_confirmation_seconds count %d, want 3", n)
				}
			},
		},
		{
			name: "success_transactional_store_sink",
			opts: contractOpts{txSink: true},
			msgs: ids(3, "tx"),
			want: repeat(3, at(1, stepsOK, "ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n, err := sink.CountStored(f.ob.DB()); err != nil || n != 3 {
					t.Errorf("store sink holds %d (%v), want 3", n, err)
				}
			},
		},
		{
			name: "success_event_id_from_json_field",
			opts: contractOpts{configure: jsonID},
			msgs: []ctMsg{{data: []byte(`{"event_id":"json-1","k":2}`)}},
			want: [][]string{at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if rs := f.receiptsInStream(); len(rs) != 1 || rs[0].EventID != "json-1" {
					t.Errorf("receipts %+v", rs)
				}
			},
		},
		{
			// Two stream messages carry one event_id (json_field mode: the
			// stream cannot dedupe them): one outbox record, one receipt,
			// both messages ACKed.
			name: "duplicate_event_id_in_one_batch",
			opts: contractOpts{configure: jsonID},
			msgs: []ctMsg{{data: []byte(`{"event_id":"twice"}`)}, {data: []byte(`{"event_id":"twice","again":true}`)}},
			want: repeat(2, at(1, stepsOK, "ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.streamMsgCount(ctReceipts); n != 1 {
					t.Errorf("receipts stream holds %d, want 1", n)
				}
				if st := f.outboxStats(); st.Pending+st.Published != 1 {
					t.Errorf("outbox %+v, want exactly one record", st)
				}
				if n := f.sink.recordsOf("twice"); n != 1 {
					t.Errorf("sink records %d, want 1", n)
				}
			},
		},
		{
			// A previous life of the box processed the event and PubAck'ed
			// its receipt, then crashed before the ACK: the redelivery finds
			// the outbox record, publishes nothing and ACKs.
			name: "redelivery_of_processed_event_acks_without_second_record",
			msgs: ids(1, "again"),
			opts: contractOpts{before: func(t *testing.T, f *contractSite) {
				rec, err := f.receiptRecord("again-0", receipts.StatusProcessed, "")
				if err != nil {
					t.Fatal(err)
				}
				stored, err := f.ob.Commit([]outbox.Record{rec}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.pub.Publish(context.Background(), stored); err != nil {
					t.Fatal(err)
				}
				if err := f.ob.MarkPublished([]string{rec.Key}); err != nil {
					t.Fatal(err)
				}
			}},
			want: [][]string{at(1, "sink_commit", "outbox_commit", "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.streamMsgCount(ctReceipts); n != 1 {
					t.Errorf("receipts stream holds %d, want 1", n)
				}
				if st := f.outboxStats(); st.Pending != 0 || st.Published != 1 {
					t.Errorf("outbox %+v, want the one published record", st)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 1, "receiptsPublished": 0})
			},
		},
		{
			// The previous life committed the receipt but crashed before
			// its PubAck: the redelivery publishes the pending record.
			name: "redelivery_with_pending_receipt_publishes_it",
			msgs: ids(1, "pend"),
			opts: contractOpts{before: func(t *testing.T, f *contractSite) {
				rec, err := f.receiptRecord("pend-0", receipts.StatusProcessed, "")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.ob.Commit([]outbox.Record{rec}, nil); err != nil {
					t.Fatal(err)
				}
			}},
			want: [][]string{at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if st := f.outboxStats(); st.Pending != 0 || st.Published != 1 {
					t.Errorf("outbox %+v", st)
				}
				if n := f.streamMsgCount(ctReceipts); n != 1 {
					t.Errorf("receipts stream holds %d, want 1", n)
				}
			},
		},

		{
			// A previous life published a receipt but lost its PubAck (the
			// record is still pending). The next batch carries it with a
			// new receipt: the atomic batch is refused for the duplicate
			// and the publisher falls back to one-by-one publishes.
			name: "lost_puback_duplicate_in_atomic_receipt_batch",
			msgs: []ctMsg{{id: "lost-0"}, {id: "new-1"}, {id: "new-2"}},
			opts: contractOpts{before: func(t *testing.T, f *contractSite) {
				rec, err := f.receiptRecord("lost-0", receipts.StatusProcessed, "")
				if err != nil {
					t.Fatal(err)
				}
				stored, err := f.ob.Commit([]outbox.Record{rec}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.pub.Publish(context.Background(), stored); err != nil {
					t.Fatal(err)
				}
			}},
			want: repeat(3, at(1, stepsOK, "ack")),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.streamMsgCount(ctReceipts); n != 3 {
					t.Errorf("receipts stream holds %d, want 3", n)
				}
				if st := f.outboxStats(); st.Published != 3 || st.Pending != 0 {
					t.Errorf("outbox %+v", st)
				}
			},
		},

		// ---- temporary failures: NAK with the computed delay, or leave; never DLQ, never Term
		{
			name: "temporary_nak_fixed_backoff",
			opts: contractOpts{configure: fixedBackoff(400), script: map[string][]sinkOutcome{"t-0": {sinkTemp, sinkTemp, sinkOK}}},
			msgs: ids(1, "t"),
			want: [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, stepsOK, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctNakDelays(t, f.stepsOf(seqs[0]), []time.Duration{400 * time.Millisecond, 400 * time.Millisecond})
				if n := f.advisoriesFor("MSG_NAKED", seqs[0]); n != 2 {
					t.Errorf("server saw %d NAKs, want 2", n)
				}
				if ci := f.consumerInfo(); ci.NumRedelivered != 0 || ci.AckFloor.Stream != seqs[0] {
					t.Errorf("consumer %+v", ci)
				}
				if n := f.sink.recordsOf("t-0"); n != 1 {
					t.Errorf("sink records %d", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"nacked": 2, "acked": 1, "redeliveries": 2, "deadLettered": 0})
			},
		},
		{
			name: "temporary_nak_exponential_backoff",
			opts: contractOpts{configure: func(c *topology.Config) {
				c.Delivery.Retry.Mode, c.Delivery.Retry.Jitter = "exponential", "none"
				c.Delivery.Retry.BackoffMS, c.Delivery.Retry.BackoffMaxMS = 150, 500
			}, script: map[string][]sinkOutcome{"x-0": {sinkTemp, sinkTemp, sinkTemp, sinkOK}}},
			msgs: ids(1, "x"),
			want: [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, "nak"), at(4, stepsOK, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				// 150ms, 300ms, then capped at 500ms.
				ctNakDelays(t, f.stepsOf(seqs[0]), []time.Duration{150 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond})
			},
		},
		{
			name: "temporary_leave_unacked_redelivered_after_ack_wait",
			opts: contractOpts{configure: all(ackWait1s, func(c *topology.Config) { c.Delivery.Retry.TemporaryFailureAction = "leave_unacked" }),
				script: map[string][]sinkOutcome{"l-0": {sinkTemp, sinkOK}}},
			msgs: ids(1, "l"),
			want: [][]string{cat(at(1, "leave"), at(2, stepsOK, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ss := f.stepsOf(seqs[0])
				if gap := ss[1].at.Sub(ss[0].at); gap < 700*time.Millisecond {
					t.Errorf("redelivered %s after leave, before AckWait (1s)", gap)
				}
				if n := f.advisoriesFor("MSG_NAKED", seqs[0]); n != 0 {
					t.Errorf("server saw %d NAKs, want 0", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"nacked": 0, "acked": 1})
			},
		},
		{
			name: "temporary_never_dead_lettered_nor_terminated",
			opts: contractOpts{configure: all(term, confirm), script: map[string][]sinkOutcome{"nt-0": {sinkTemp, sinkTemp, sinkOK}}},
			msgs: ids(1, "nt"),
			want: [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, stepsOK, "double_ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.streamMsgCount(f.cfg.DeadLetter.Stream); n != 0 {
					t.Errorf("DLQ holds %d", n)
				}
				if n := len(f.advisories("MSG_TERMINATED")); n != 0 {
					t.Errorf("server saw %d Terms", n)
				}
				// NAKs are never confirmed; only the final ACK is.
				ctCounters(t, f.metrics, map[string]float64{"ackConfAttempts": 1, "ackConfSuccesses": 1, "terminated": 0, "deadLettered": 0})
			},
		},
		{
			name: "temporary_in_batch_only_that_message_naks",
			opts: contractOpts{script: map[string][]sinkOutcome{"m-2": {sinkTemp, sinkOK}}},
			msgs: ids(5, "m"),
			want: [][]string{
				at(1, stepsOK, "ack"), at(1, stepsOK, "ack"),
				cat(at(1, "nak"), at(2, stepsOK, "ack")),
				at(1, stepsOK, "ack"), at(1, stepsOK, "ack"),
			},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.streamMsgCount(ctReceipts); n != 5 {
					t.Errorf("receipts %d, want 5", n)
				}
			},
		},

		// ---- permanent failures without a DLQ: left unacked, counted
		{
			name:    "permanent_without_dlq_left_unacked",
			opts:    contractOpts{script: map[string][]sinkOutcome{"p-0": perm}},
			msgs:    ids(1, "p"),
			want:    [][]string{at(1, "leave")},
			pending: 1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.streamMsgCount(ctReceipts); n != 0 {
					t.Errorf("receipts %d, want 0", n)
				}
				if len(f.advisories("MSG_TERMINATED"))+len(f.advisories("MSG_NAKED")) != 0 {
					t.Error("permanent failure without DLQ was NAKed or terminated")
				}
				ctCounters(t, f.metrics, map[string]float64{"permanentUnacked": 1, "acked": 0, "nacked": 0, "terminated": 0})
			},
		},
		{
			name:    "permanent_without_dlq_left_again_on_redelivery",
			opts:    contractOpts{configure: all(ackWait1s, func(c *topology.Config) { c.DeadLetter.AckTermAfterPub = true }), script: map[string][]sinkOutcome{"pr-0": perm}},
			msgs:    ids(1, "pr"),
			want:    [][]string{cat(at(1, "leave"), at(2, "leave"))},
			pending: 1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"permanentUnacked": 2, "acked": 0, "terminated": 0})
			},
		},
		{
			name:    "missing_event_id_without_dlq_left_unacked",
			msgs:    []ctMsg{{}},
			want:    [][]string{at(1, "leave")},
			pending: 1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if b := f.sink.writeBatches(); len(b) != 0 {
					t.Errorf("sink saw %v", b)
				}
			},
		},

		// ---- permanent failures with a DLQ
		{
			name: "permanent_with_dlq_ack",
			opts: contractOpts{configure: dlqOn, script: map[string][]sinkOutcome{"d-0": perm}},
			msgs: []ctMsg{{id: "d-0", header: map[string]string{"X-Secret": "s3cret"}, data: []byte(`{"secret":"payload"}`)}},
			want: [][]string{at(1, stepsDLQ, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				recs := f.dlqRecords()
				if len(recs) != 1 {
					t.Fatalf("DLQ records %d, want 1", len(recs))
				}
				r := recs[0]
				if r.Site != ctSite || r.Subject != "events.test" || r.Stream != ctStream || r.Consumer != ctConsumer ||
					r.StreamSeq != seqs[0] || r.ConsumerSeq != 1 || r.EventID != "d-0" || r.EventIDError != "" ||
					r.Delivered != 1 || r.ErrorType != "sink_permanent" || r.Version != runner.DLQVersion {
					t.Errorf("DLQ record %+v", r)
				}
				if time.Since(r.DeadLetteredAt) > time.Minute || r.DeadLetteredAt.After(time.Now()) {
					t.Errorf("dead_lettered_at %s", r.DeadLetteredAt)
				}
				if r.Payload != nil || r.Headers != nil || r.Error != "" {
					t.Errorf("DLQ record carries payload/headers/error without include_*: %+v", r)
				}
				raw := f.streamRawMsgs(f.cfg.DeadLetter.Stream)[0].Data
				if strings.Contains(string(raw), "s3cret") || strings.Contains(string(raw), "payload") {
					t.Errorf("DLQ record leaks the message: %s", raw)
				}
				rs := f.receiptsInStream()
				if len(rs) != 1 || rs[0].EventID != "d-0" || rs[0].Status != receipts.StatusDeadLettered || rs[0].Reason != "sink_permanent" {
					t.Errorf("receipts %+v, want one dead_lettered", rs)
				}
				ctCounters(t, f.metrics, map[string]float64{"deadLettered": 1, "acked": 1, "terminated": 0, "processed": 0, "dlqPublishErrors": 0})
			},
		},
		{
			name: "permanent_with_dlq_confirmed_ack",
			opts: contractOpts{configure: all(dlqOn, confirm), script: map[string][]sinkOutcome{"dc-0": perm}},
			msgs: ids(1, "dc"),
			want: [][]string{at(1, stepsDLQ, "double_ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"ackConfAttempts": 1, "ackConfSuccesses": 1, "deadLettered": 1, "acked": 1})
				if n := len(f.advisories("MSG_TERMINATED")); n != 0 {
					t.Errorf("%d Terms without ack_term_after_publish", n)
				}
			},
		},
		{
			name: "permanent_with_dlq_term",
			opts: contractOpts{configure: term, script: map[string][]sinkOutcome{"dt-0": perm}},
			msgs: ids(1, "dt"),
			want: [][]string{at(1, stepsDLQ, "term")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
					if n := f.advisoriesFor("MSG_TERMINATED", seqs[0]); n != 1 {
						return fmt.Errorf("server saw %d Terms of seq %d, want 1", n, seqs[0])
					}
					return nil
				})
				ctCounters(t, f.metrics, map[string]float64{"terminated": 1, "acked": 0, "deadLettered": 1, "ackConfAttempts": 0, "ackConfUnsupported": 0})
				if n := f.streamMsgCount(f.cfg.DeadLetter.Stream); n != 1 {
					t.Errorf("DLQ holds %d", n)
				}
			},
		},
		{
			name: "permanent_with_dlq_term_confirmed",
			opts: contractOpts{configure: all(term, confirm), script: map[string][]sinkOutcome{"dtc-0": perm}},
			msgs: ids(1, "dtc"),
			want: [][]string{at(1, stepsDLQ, "confirmed_term")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
					if n := f.advisoriesFor("MSG_TERMINATED", seqs[0]); n != 1 {
						return fmt.Errorf("server saw %d Terms, want 1", n)
					}
					return nil
				})
				ctCounters(t, f.metrics, map[string]float64{"terminated": 1, "ackConfAttempts": 1, "ackConfSuccesses": 1, "ackConfUnsupported": 0, "acked": 0})
			},
		},
		{
			name: "permanent_with_dlq_include_payload_headers_error",
			opts: contractOpts{configure: func(c *topology.Config) {
				c.DeadLetter.Enabled, c.DeadLetter.IncludePayload, c.DeadLetter.IncludeHeaders, c.DeadLetter.IncludeError = true, true, true, true
			}, script: map[string][]sinkOutcome{"inc-0": perm}},
			msgs: []ctMsg{{id: "inc-0", header: map[string]string{"X-Trace": "t1"}, data: []byte("raw\x00bytes")}},
			want: [][]string{at(1, stepsDLQ, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				recs := f.dlqRecords()
				if len(recs) != 1 {
					t.Fatalf("DLQ records %d", len(recs))
				}
				r := recs[0]
				if string(r.Payload) != "raw\x00bytes" {
					t.Errorf("payload %q", r.Payload)
				}
				if r.Headers["X-Trace"] == nil || r.Headers[jetstream.MsgIDHeader] == nil {
					t.Errorf("headers %v", r.Headers)
				}
				if !strings.Contains(r.Error, "injected permanent failure") {
					t.Errorf("error %q", r.Error)
				}
			},
		},

		// ---- malformed messages → DLQ
		{
			name: "missing_event_id_header_dead_lettered",
			opts: contractOpts{configure: dlqOn},
			msgs: []ctMsg{{}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "missing")
				if n := f.streamMsgCount(ctReceipts); n != 0 {
					t.Errorf("a receipt without an event_id was published (%d)", n)
				}
				if b := f.sink.writeBatches(); len(b) != 0 {
					t.Errorf("sink saw %v", b)
				}
			},
		},
		{
			name: "json_field_missing_dead_lettered",
			opts: contractOpts{configure: all(dlqOn, jsonID)},
			msgs: []ctMsg{{data: []byte(`{"id":"nope"}`)}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "missing")
			},
		},
		{
			name: "json_field_not_a_string_dead_lettered",
			opts: contractOpts{configure: all(dlqOn, jsonID)},
			msgs: []ctMsg{{data: []byte(`{"event_id":42}`)}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "not a string")
			},
		},
		{
			name: "payload_not_json_dead_lettered",
			opts: contractOpts{configure: all(dlqOn, jsonID)},
			msgs: []ctMsg{{data: []byte(`not json`)}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "not a JSON object")
			},
		},
		{
			name: "event_id_too_long_dead_lettered",
			opts: contractOpts{configure: dlqOn},
			msgs: []ctMsg{{id: strings.Repeat("x", 600)}},
			want: [][]string{at(1, stepsDLQNoR, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "", "no_event_id", "600 bytes")
			},
		},
		{
			// The event_id is readable, so L1 learns the event is dead.
			name: "oversize_message_dead_lettered_with_receipt",
			opts: contractOpts{configure: all(dlqOn, func(c *topology.Config) { c.Delivery.MaxMessageBytes = 64 })},
			msgs: []ctMsg{{id: "big-0", data: []byte(strings.Repeat("z", 200))}},
			want: [][]string{at(1, stepsDLQ, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "big-0", "oversize", "")
				if rs := f.receiptsInStream(); len(rs) != 1 || rs[0].Status != receipts.StatusDeadLettered || rs[0].Reason != "oversize" {
					t.Errorf("receipts %+v", rs)
				}
				if b := f.sink.writeBatches(); len(b) != 0 {
					t.Errorf("sink saw an oversize message: %v", b)
				}
			},
		},
		{
			name: "missing_event_id_terminated",
			opts: contractOpts{configure: all(term, confirm)},
			msgs: []ctMsg{{}},
			want: [][]string{at(1, stepsDLQNoR, "confirmed_term")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
					if n := f.advisoriesFor("MSG_TERMINATED", seqs[0]); n != 1 {
						return fmt.Errorf("%d Terms", n)
					}
					return nil
				})
			},
		},

		// ---- poison isolation
		{
			name: "poison_in_batch_only_it_dead_lettered",
			opts: contractOpts{configure: dlqOn, script: map[string][]sinkOutcome{"q-4": perm}},
			msgs: ids(10, "q"),
			want: func() [][]string {
				w := repeat(10, at(1, stepsOK, "ack"))
				w[4] = at(1, stepsDLQ, "ack")
				return w
			}(),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if b := f.sink.writeBatches(); len(b) != 1 || len(b[0]) != 10 {
					t.Errorf("sink batches %v, want one batch of 10", b)
				}
				recs := f.dlqRecords()
				if len(recs) != 1 || recs[0].EventID != "q-4" || recs[0].StreamSeq != seqs[4] {
					t.Errorf("DLQ %+v", recs)
				}
				var processed, dead int
				for _, r := range f.receiptsInStream() {
					switch {
					case r.Status == receipts.StatusProcessed && r.EventID != "q-4":
						processed++
					case r.Status == receipts.StatusDeadLettered && r.EventID == "q-4":
						dead++
					default:
						t.Errorf("unexpected receipt %+v", r)
					}
				}
				if processed != 9 || dead != 1 {
					t.Errorf("receipts: %d processed, %d dead_lettered; want 9 and 1", processed, dead)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 10, "processed": 9, "deadLettered": 1})
			},
		},
		{
			name: "poison_without_event_id_in_batch",
			opts: contractOpts{configure: dlqOn},
			msgs: []ctMsg{{id: "r-0"}, {id: "r-1"}, {}, {id: "r-3"}, {id: "r-4"}},
			want: [][]string{
				at(1, stepsOK, "ack"), at(1, stepsOK, "ack"), at(1, stepsDLQNoR, "ack"), at(1, stepsOK, "ack"), at(1, stepsOK, "ack"),
			},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if b := f.sink.writeBatches(); len(b) != 1 || len(b[0]) != 4 {
					t.Errorf("sink batches %v, want one batch of the 4 good events", b)
				}
				if n := f.streamMsgCount(ctReceipts); n != 4 {
					t.Errorf("receipts %d, want 4", n)
				}
			},
		},
		{
			// AckTerm never follows a successful sink write, even in a
			// batch where another message is terminated.
			name: "mixed_batch_term_only_the_poison",
			opts: contractOpts{configure: all(term, confirm), script: map[string][]sinkOutcome{"mx-1": perm}},
			msgs: ids(3, "mx"),
			want: [][]string{at(1, stepsOK, "double_ack"), at(1, stepsDLQ, "confirmed_term"), at(1, stepsOK, "double_ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
					if n := len(f.advisories("MSG_TERMINATED")); n != 1 {
						return fmt.Errorf("%d Terms", n)
					}
					return nil
				})
				if f.advisoriesFor("MSG_TERMINATED", seqs[1]) != 1 {
					t.Error("the Term was not for the poison message")
				}
				ctCounters(t, f.metrics, map[string]float64{"ackConfAttempts": 3, "ackConfSuccesses": 3, "terminated": 1, "acked": 2})
			},
		},
		{
			// The transactional sink has no per-event permanent error, but
			// a malformed message still never reaches it.
			name: "poison_with_transactional_sink",
			opts: contractOpts{configure: dlqOn, txSink: true},
			msgs: []ctMsg{{id: "s-0"}, {}, {id: "s-2"}},
			want: [][]string{at(1, stepsOK, "ack"), at(1, stepsDLQNoR, "ack"), at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n, _ := sink.CountStored(f.ob.DB()); n != 2 {
					t.Errorf("stored %d, want 2", n)
				}
			},
		},

		// ---- DLQ publish failure: no ACK, no Term, no confirmation attempt
		{
			// The DLQ stream does not exist; the trace hook creates it at
			// the first NAK, and the redelivery completes.
			name: "dlq_stream_missing_holds_until_created",
			opts: contractOpts{configure: all(term, confirm), dlq: dlqMissing, script: map[string][]sinkOutcome{"dm-0": perm},
				onStep: func(f *contractSite, s ctStep) {
					if s.name == "nak" && s.delivered == 1 {
						if m := ctCounterValues(f.metrics); m["ackConfAttempts"] != 0 || m["terminated"] != 0 || m["acked"] != 0 {
							f.t.Errorf("after a failed DLQ publish: %v", m)
						}
						ctCreateDLQStream(f, 0)
					}
				}},
			msgs: ids(1, "dm"),
			want: [][]string{cat(at(1, "dlq_publish", "nak"), at(2, stepsDLQ, "confirmed_term"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"dlqPublishErrors": 1, "nacked": 1, "ackConfAttempts": 1, "terminated": 1})
				if recs := f.dlqRecords(); len(recs) != 1 || recs[0].Delivered != 2 {
					t.Errorf("DLQ %+v", recs)
				}
				if n := f.advisoriesFor("MSG_TERMINATED", seqs[0]); n != 1 {
					t.Errorf("%d Terms", n)
				}
			},
		},
		{
			// The DLQ stream is full (MaxMsgs 1, DiscardNew); the hook
			// raises its limit at the second NAK.
			name: "dlq_stream_full_holds_until_room",
			opts: contractOpts{configure: term, dlq: dlqFull, script: map[string][]sinkOutcome{"df-0": perm},
				onStep: func(f *contractSite, s ctStep) {
					if s.name == "nak" && s.delivered == 2 {
						ctCreateDLQStream(f, 10)
					}
				}},
			msgs: ids(1, "df"),
			want: [][]string{cat(at(1, "dlq_publish", "nak"), at(2, "dlq_publish", "nak"), at(3, stepsDLQ, "term"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"dlqPublishErrors": 2, "nacked": 2, "terminated": 1, "acked": 0})
				if n := f.streamMsgCount(f.cfg.DeadLetter.Stream); n != 2 {
					t.Errorf("DLQ holds %d, want filler + 1", n)
				}
				if st := f.outboxStats(); st.Published != 1 || st.Pending != 0 {
					t.Errorf("outbox %+v: the dead_lettered receipt must be committed once, after the DLQ PubAck", st)
				}
			},
		},
		{
			name:    "dlq_publish_failure_left_unacked_with_leave_action",
			opts:    contractOpts{configure: all(term, func(c *topology.Config) { c.Delivery.Retry.TemporaryFailureAction = "leave_unacked" }), dlq: dlqMissing, script: map[string][]sinkOutcome{"dl-0": perm}},
			msgs:    ids(1, "dl"),
			want:    [][]string{at(1, "dlq_publish", "leave")},
			pending: 1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctCounters(t, f.metrics, map[string]float64{"dlqPublishErrors": 1, "terminated": 0, "acked": 0, "nacked": 0})
			},
		},

		{
			// The DLQ stream is full: only the poison is held; the rest of
			// the batch commits and is ACKed.
			name: "dlq_failure_in_batch_holds_only_the_poison",
			opts: contractOpts{configure: term, dlq: dlqFull, script: map[string][]sinkOutcome{"h-1": perm},
				onStep: func(f *contractSite, s ctStep) {
					if s.name == "nak" && s.delivered == 1 {
						ctCreateDLQStream(f, 10)
					}
				}},
			msgs: ids(4, "h"),
			want: [][]string{
				at(1, stepsOK, "ack"),
				cat(at(1, "dlq_publish", "nak"), at(2, stepsDLQ, "term")),
				at(1, stepsOK, "ack"), at(1, stepsOK, "ack"),
			},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.streamMsgCount(ctReceipts); n != 4 {
					t.Errorf("receipts %d, want 3 processed + 1 dead_lettered", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"dlqPublishErrors": 1, "acked": 3, "terminated": 1})
			},
		},

		// ---- max_deliver exhaustion
		{
			name: "max_deliver_dead_letter",
			opts: contractOpts{configure: all(dlqOn, func(c *topology.Config) {
				c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 3, "dead_letter"
			}), script: map[string][]sinkOutcome{"md-0": temp}},
			msgs: ids(1, "md"),
			want: [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, stepsDLQ, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ctWantDLQ(t, f, seqs[0], "md-0", "max_deliver", "")
				if r := f.dlqRecords()[0]; r.Delivered != 3 {
					t.Errorf("delivered %d", r.Delivered)
				}
				if rs := f.receiptsInStream(); len(rs) != 1 || rs[0].Status != receipts.StatusDeadLettered || rs[0].Reason != "max_deliver" {
					t.Errorf("receipts %+v", rs)
				}
				ctCounters(t, f.metrics, map[string]float64{"maxDeliverExhausted": 1, "deadLettered": 1, "nacked": 2})
				if n := len(f.advisories("MAX_DELIVERIES")); n != 0 {
					t.Errorf("%d max-deliveries advisories", n)
				}
			},
		},
		{
			name: "max_deliver_leave_counts_the_advisory",
			opts: contractOpts{configure: all(dlqOn, func(c *topology.Config) {
				c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 3, "leave"
			}), script: map[string][]sinkOutcome{"ml-0": temp}},
			msgs:    ids(1, "ml"),
			want:    [][]string{cat(at(1, "nak"), at(2, "nak"), at(3, "nak"))},
			pending: -1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
					if n := f.advisoriesFor("MAX_DELIVERIES", seqs[0]); n != 1 {
						return fmt.Errorf("%d max-deliveries advisories", n)
					}
					return nil
				})
				if n := f.streamMsgCount(f.cfg.DeadLetter.Stream); n != 0 {
					t.Errorf("DLQ holds %d", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"maxDeliverExhausted": 1, "deadLettered": 0, "acked": 0, "terminated": 0})
			},
		},
		{
			name: "max_deliver_dead_letter_then_term",
			opts: contractOpts{configure: all(term, func(c *topology.Config) {
				c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 2, "dead_letter"
			}), script: map[string][]sinkOutcome{"mt-0": temp}},
			msgs: ids(1, "mt"),
			want: [][]string{cat(at(1, "nak"), at(2, stepsDLQ, "term"))},
		},

		// ---- receipt publish failure: no ACK, redelivered, completes once
		{
			name: "receipt_publish_fails_no_ack_then_once",
			opts: contractOpts{wrapPub: failFirst(2)},
			msgs: ids(1, "rf"),
			want: [][]string{cat(
				at(1, "sink_commit", "outbox_commit", "receipt_publish", "nak"),
				at(2, "sink_commit", "outbox_commit", "receipt_publish", "nak"),
				at(3, stepsOK, "ack"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.sink.recordsOf("rf-0"); n != 1 {
					t.Errorf("sink records %d", n)
				}
				if st := f.outboxStats(); st.Published != 1 || st.Pending != 0 {
					t.Errorf("outbox %+v", st)
				}
				if n := f.streamMsgCount(ctReceipts); n != 1 {
					t.Errorf("receipts %d", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"receiptPublishErrors": 2, "acked": 1, "nacked": 2})
			},
		},
		{
			// Real fault: the receipts stream does not exist until the
			// first NAK.
			name: "receipts_stream_missing_until_created",
			opts: contractOpts{noReceiptsStream: true, onStep: func(f *contractSite, s ctStep) {
				if s.name == "nak" && s.delivered == 1 {
					site, _ := f.cfg.Topology.Site(ctSite)
					for _, sc := range sitePlan(f.cfg, site).streams {
						if sc.Name == ctReceipts {
							if _, err := f.client.CreateStream(context.Background(), sc); err != nil {
								f.t.Error(err)
							}
						}
					}
				}
			}},
			msgs: ids(3, "rm"),
			want: repeat(3, cat(at(1, "sink_commit", "outbox_commit", "receipt_publish", "nak"), at(2, stepsOK, "ack"))),
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if n := f.streamMsgCount(ctReceipts); n != 3 {
					t.Errorf("receipts %d", n)
				}
			},
		},
		{
			// A dead letter whose dead_lettered receipt is not PubAck'ed is
			// redelivered and dead-lettered again: the DLQ stream keeps
			// one record (Nats-Msg-Id).
			name: "redelivered_dead_letter_single_dlq_record",
			opts: contractOpts{configure: term, wrapPub: failFirst(1), script: map[string][]sinkOutcome{"rd-0": perm}},
			msgs: ids(1, "rd"),
			want: [][]string{cat(
				at(1, "dlq_publish", "dlq_puback", "outbox_commit", "receipt_publish", "nak"),
				at(2, stepsDLQ, "term"))},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if recs := f.dlqRecords(); len(recs) != 1 || recs[0].Delivered != 1 {
					t.Errorf("DLQ %+v, want one record from delivery 1", recs)
				}
				if n := f.streamMsgCount(ctReceipts); n != 1 {
					t.Errorf("receipts %d", n)
				}
				ctCounters(t, f.metrics, map[string]float64{"terminated": 1, "dlqPublishErrors": 0, "receiptPublishErrors": 1})
			},
		},

		// ---- InProgress heartbeats during a slow sink
		{
			name: "in_progress_heartbeats_prevent_redelivery",
			opts: ctSlowSink(true),
			msgs: ids(1, "ip"),
			want: [][]string{at(1, stepsOK, "ack")},
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				if ci := f.consumerInfo(); ci.NumRedelivered != 0 || ci.AckFloor.Stream != seqs[0] {
					t.Errorf("consumer %+v", ci)
				}
				wpi := len(f.wireOf(seqs[0], true)) - len(f.wireOf(seqs[0], false))
				if wpi < 4 {
					t.Errorf("%d InProgress heartbeats during a 2.5s write with a 250ms interval", wpi)
				}
			},
		},
		{
			// Control for the case above: without heartbeats the same slow
			// write lets the server redeliver the message (the probe gets it).
			name: "slow_sink_without_in_progress_is_redelivered",
			opts: ctSlowSink(false),
			msgs: ids(1, "ip"),
			want: [][]string{at(1, stepsOK, "ack")},
		},

		// ---- shutdown
		{
			// The runner is cancelled while the sink write runs: the batch
			// finishes (its work is durable, so it is ACKed), and nothing
			// else is fetched.
			name:    "shutdown_mid_batch_finishes_then_stops",
			opts:    ctShutdownSink(),
			msgs:    ids(3, "sd"),
			want:    [][]string{at(1, stepsOK, "ack"), nil, nil},
			pending: -1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ci := f.consumerInfo()
				if ci.NumAckPending != 0 || ci.NumPending != 2 || ci.AckFloor.Stream != seqs[0] {
					t.Errorf("consumer ack pending %d, pending %d, floor %d: want 0, 2, %d",
						ci.NumAckPending, ci.NumPending, ci.AckFloor.Stream, seqs[0])
				}
			},
		},
		{
			name: "shutdown_mid_batch_failed_write_not_acked",
			opts: func() contractOpts {
				o := ctShutdownSink()
				o.script = map[string][]sinkOutcome{"sd-0": temp}
				return o
			}(),
			msgs:    ids(3, "sd"),
			want:    [][]string{at(1, "nak"), nil, nil},
			pending: -1,
			check: func(t *testing.T, f *contractSite, seqs []uint64) {
				ci := f.consumerInfo()
				if ci.AckFloor.Stream != 0 || ci.NumPending+uint64(ci.NumAckPending) != 3 {
					t.Errorf("consumer %+v: nothing may be ACKed", ci)
				}
				ctCounters(t, f.metrics, map[string]float64{"acked": 0})
			},
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runContractCase(t, tc)
		})
	}
}

// BUG 1 (see the report): a dead letter's only protection against a second
// DLQ record is the DLQ stream's Nats-Msg-Id duplicate window. A message
// held after its DLQ PubAck (here: its dead_lettered receipt is not
// PubAck'ed) and redelivered after the window gets a second DLQ record.
// Redeliveries that late are ordinary: NAK backoff up to 24h, AckWait up to
// 1h, a receipts stream that stays full during a long link cut.
func TestContractBug_DeadLetterRedeliveredAfterDuplicateWindow(t *testing.T) {
	t.Parallel()
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) {
			c.DeadLetter.Enabled = true
			c.Topology.Events.DuplicateWindow = topology.Duration(time.Second)
			c.Delivery.Retry.BackoffMS, c.Delivery.Retry.BackoffMaxMS = 2500, 2500
		},
		wrapPub: failFirst(1),
		script:  map[string][]sinkOutcome{"win-0": {sinkPerm}},
	})
	seq := f.publish(ctMsg{id: "win-0"})[0]
	f.start()
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if ss := stepNames(f.stepsOf(seq)); !slices.Contains(ss, "ack@2") {
			return fmt.Errorf("steps %v", ss)
		}
		return nil
	})
	if recs := f.dlqRecords(); len(recs) != 1 {
		t.Errorf("DLQ stream holds %d records for one message (deliveries %v): a redelivered dead letter was dead-lettered again", len(recs), ctDelivered(recs))
	}
}

func ctDelivered(recs []runner.DLQRecord) []uint64 {
	var out []uint64
	for _, r := range recs {
		out = append(out, r.Delivered)
	}
	return out
}

// BUG 2 (see the report): with max_deliver_action dead_letter, a DLQ
// publish failure on the last delivery NAKs a message that the server will
// never redeliver: no DLQ record, no dead_lettered receipt, no ACK — the
// configured outcome silently does not happen.
func TestContractBug_MaxDeliverDeadLetterLostWhenDLQFailsOnLastDelivery(t *testing.T) {
	t.Parallel()
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) {
			c.DeadLetter.Enabled = true
			c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 2, "dead_letter"
		},
		dlq:    dlqMissing,
		script: map[string][]sinkOutcome{"last-0": {sinkTemp}},
		onStep: func(f *contractSite, s ctStep) {
			if s.name == "nak" && s.delivered == 2 {
				ctCreateDLQStream(f, 0) // the DLQ is back right away
			}
		},
	})
	seq := f.publish(ctMsg{id: "last-0"})[0]
	f.start()
	check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
		if f.advisoriesFor("MAX_DELIVERIES", seq) > 0 || f.streamMsgCount(f.cfg.DeadLetter.Stream) > 0 {
			return nil
		}
		return fmt.Errorf("steps %v", stepNames(f.stepsOf(seq)))
	})
	if n := f.advisoriesFor("MAX_DELIVERIES", seq); n > 0 {
		t.Fatalf("the server gave up on the message after %v; it was never dead-lettered (DLQ holds %d, receipts %d)",
			stepNames(f.stepsOf(seq)), f.streamMsgCount(f.cfg.DeadLetter.Stream), f.streamMsgCount(ctReceipts))
	}
}

// BUG 3 (see the report): max_deliver exhaustion with action leave is
// counted only when the sink's own error is temporary. A message held by a
// DLQ publish failure (a temporary failure) on its last delivery is dropped
// by the server (max-deliveries advisory) while max_deliver_exhausted_total
// stays 0.
func TestContractBug_MaxDeliverExhaustionOfHeldMessageNotCounted(t *testing.T) {
	t.Parallel()
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) {
			c.DeadLetter.Enabled = true
			c.Delivery.MaxDeliver, c.Delivery.MaxDeliverAction = 2, "leave"
		},
		dlq:    dlqMissing,
		script: map[string][]sinkOutcome{"held-0": {sinkPerm}},
	})
	seq := f.publish(ctMsg{id: "held-0"})[0]
	f.start()
	check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
		if f.advisoriesFor("MAX_DELIVERIES", seq) == 0 {
			return fmt.Errorf("no max-deliveries advisory yet; steps %v", stepNames(f.stepsOf(seq)))
		}
		return nil
	})
	if got := stepNames(f.stepsOf(seq)); !slices.Equal(got, cat(at(1, "dlq_publish", "nak"), at(2, "dlq_publish", "nak"))) {
		t.Errorf("steps %v", got)
	}
	if v := ctCounterValues(f.metrics)["maxDeliverExhausted"]; v != 1 {
		t.Errorf("max_deliver_exhausted_total = %v after the server gave up on the message, want 1", v)
	}
}

func runContractCase(t *testing.T, tc contractCase) {
	f := newContractSite(t, tc.opts)
	seqs := f.publish(tc.msgs...)
	if tc.opts.before != nil {
		tc.opts.before(t, f)
	}
	if f.t.Failed() {
		return
	}
	f.start()
	for i, want := range tc.want {
		if len(want) == 0 {
			continue
		}
		check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
			if got := stepNames(f.stepsOf(seqs[i])); len(got) < len(want) {
				return fmt.Errorf("message %d (seq %d): steps %v, want %v", i, seqs[i], got, want)
			}
			return nil
		})
	}
	if tc.pending >= 0 {
		check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
			if ci := f.consumerInfo(); ci.NumAckPending != tc.pending {
				return fmt.Errorf("consumer ack pending %d, want %d", ci.NumAckPending, tc.pending)
			}
			return nil
		})
	}
	for i, want := range tc.want {
		got := f.stepsOf(seqs[i])
		if !slices.Equal(stepNames(got), want) {
			t.Errorf("message %d (seq %d):\n got  %v\n want %v", i, seqs[i], stepNames(got), want)
		}
		checkContractInvariants(t, fmt.Sprintf("message %d", i), got)
		f.checkWire(t, i, seqs[i], got)
	}
	if tc.check != nil {
		tc.check(t, f, seqs)
	}
	if f.sink != nil {
		f.sink.mu.Lock()
		for id, n := range f.sink.records {
			if n > 1 {
				t.Errorf("sink holds %d records of %q", n, id)
			}
		}
		f.sink.mu.Unlock()
	}
	// A receipt is never in the stream twice.
	if f.streamMsgCount(ctReceipts) > 0 {
		seen := map[string]bool{}
		for _, r := range f.receiptsInStream() {
			k := r.EventID + "/" + string(r.Status)
			if seen[k] {
				t.Errorf("receipt %s published twice", k)
			}
			seen[k] = true
		}
	}
}

// checkWire checks that the server received exactly the acknowledgements
// the trace claims, in order, each in its form: a confirmed ACK or Term is
// a request the server answers, an ordinary one is not; a NAK carries the
// backoff computed for its delivery; "leave" sends nothing.
func (f *contractSite) checkWire(t *testing.T, i int, seq uint64, steps []ctStep) {
	t.Helper()
	var want []string
	var delays []time.Duration
	for _, s := range steps {
		if finalSteps[s.name] && s.name != "leave" {
			want = append(want, fmt.Sprintf("%s@%d", s.name, s.delivered))
			if s.name == "nak" {
				delays = append(delays, runner.Backoff(f.cfg.Delivery.Retry)(s.delivered))
			}
		}
	}
	var got []string
	var wires []ctWire
	check.For(t, 5*time.Second, 50*time.Millisecond, func() error {
		wires = f.wireOf(seq, false)
		got = got[:0]
		for _, w := range wires {
			got = append(got, fmt.Sprintf("%s@%d", w.kind(), w.delivered))
		}
		if len(got) < len(want) {
			return fmt.Errorf("message %d: wire %v, want %v", i, got, want)
		}
		return nil
	})
	if !slices.Equal(got, want) {
		t.Errorf("message %d (seq %d) on the wire:\n got  %v\n want %v", i, seq, got, want)
		return
	}
	if f.cfg.Delivery.Retry.Jitter != "none" {
		return
	}
	k := 0
	for _, w := range wires {
		if w.kind() == "nak" {
			if w.nakDelay() != delays[k] {
				t.Errorf("message %d: NAK of delivery %d asked for %s, want the computed %s", i, w.delivered, w.nakDelay(), delays[k])
			}
			k++
		}
	}
}

// ---------------------------------------------------------------------------
// Case helpers.

// failFirst returns a publisher wrapper that fails its first n calls.
func failFirst(n int64) func(outbox.Publisher) outbox.Publisher {
	return func(p outbox.Publisher) outbox.Publisher {
		fp := &failingPublisher{next: p}
		fp.fails.Store(n)
		return fp
	}
}

// ctCreateDLQStream creates the appliance's DLQ stream, or updates it to
// hold maxMsgs messages (0: no limit).
func ctCreateDLQStream(f *contractSite, maxMsgs int64) {
	site, _ := f.cfg.Topology.Site(ctSite)
	for _, sc := range sitePlan(f.cfg, site).streams {
		if sc.Name != f.cfg.DeadLetter.Stream {
			continue
		}
		if maxMsgs > 0 {
			sc.MaxMsgs = maxMsgs
		}
		if _, err := f.client.CreateOrUpdateStream(context.Background(), sc); err != nil {
			f.t.Error(err)
		}
	}
}

// ctWantDLQ checks the one DLQ record of seq.
func ctWantDLQ(t *testing.T, f *contractSite, seq uint64, eventID, errorType, idErrContains string) {
	t.Helper()
	recs := f.dlqRecords()
	if len(recs) != 1 {
		t.Fatalf("DLQ records %d, want 1", len(recs))
	}
	r := recs[0]
	if r.StreamSeq != seq || r.EventID != eventID || r.ErrorType != errorType {
		t.Errorf("DLQ record %+v: want seq %d event_id %q error_type %q", r, seq, eventID, errorType)
	}
	if eventID == "" && (r.EventIDError == "" || !strings.Contains(r.EventIDError, idErrContains)) {
		t.Errorf("event_id_error %q, want it to mention %q", r.EventIDError, idErrContains)
	}
	if eventID != "" && r.EventIDError != "" {
		t.Errorf("event_id_error %q with an event_id", r.EventIDError)
	}
	if r.Payload != nil || r.Headers != nil || r.Error != "" {
		t.Errorf("DLQ record carries payload/headers/error without include_*")
	}
}

// ctNakDelays checks that each redelivery came no earlier than about the
// NAK delay after the NAK (generous bounds: half the delay, at most 10s).
func ctNakDelays(t *testing.T, steps []ctStep, delays []time.Duration) {
	t.Helper()
	for i, d := range delays {
		var nak, next time.Time
		for _, s := range steps {
			if s.delivered == uint64(i+1) && s.name == "nak" {
				nak = s.at
			}
			if s.delivered == uint64(i+2) && next.IsZero() {
				next = s.at
			}
		}
		if nak.IsZero() || next.IsZero() {
			t.Errorf("delivery %d: no NAK or no redelivery in %v", i+1, stepNames(steps))
			continue
		}
		if gap := next.Sub(nak); gap < d/2 || gap > d+10*time.Second {
			t.Errorf("delivery %d: redelivered %s after the NAK, want about %s", i+1, gap, d)
		}
	}
}

// ctSlowSink: the sink write takes longer than AckWait (1s). While it runs
// the test probes the consumer from its own connection: with InProgress
// heartbeats nothing is redelivered for 2.5 AckWaits; without them the
// probe receives the redelivery.
func ctSlowSink(heartbeats bool) contractOpts {
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	o := contractOpts{
		configure: func(c *topology.Config) {
			c.Delivery.AckWait = topology.Duration(time.Second)
			c.Delivery.InProgress.Enabled = heartbeats
			c.Delivery.InProgress.IntervalMS = 250
		},
		hold: func(sink.Event) {
			once.Do(func() { close(started) })
			<-release
		},
	}
	o.before = func(t *testing.T, f *contractSite) {
		go func() {
			defer close(release)
			<-started
			ctx := context.Background()
			cons, err := f.client.Consumer(ctx, ctStream, ctConsumer)
			if err != nil {
				t.Error(err)
				return
			}
			probe := func() (uint64, bool) {
				b, err := cons.Fetch(1, jetstream.FetchMaxWait(250*time.Millisecond))
				if err != nil {
					return 0, false
				}
				for m := range b.Messages() {
					md, _ := m.Metadata()
					return md.NumDelivered, true // never acked by the probe
				}
				return 0, false
			}
			deadline := time.Now().Add(2500 * time.Millisecond)
			for time.Now().Before(deadline) {
				if d, ok := probe(); ok {
					if heartbeats {
						t.Errorf("redelivered (delivery %d) while the sink ran, despite InProgress heartbeats", d)
					}
					return
				}
			}
			if !heartbeats {
				t.Error("control: without heartbeats the message was not redelivered after 2.5 AckWaits; the probe proves nothing")
			}
		}()
	}
	return o
}

// ctShutdownSink: batch size 1; the first write blocks until the runner
// has been cancelled.
func ctShutdownSink() contractOpts {
	var f *contractSite
	o := contractOpts{configure: func(c *topology.Config) { c.Delivery.BatchSize = 1 }}
	o.before = func(t *testing.T, site *contractSite) { f = site }
	o.hold = func(sink.Event) {
		f.cancel()
	}
	return o
}

// ctCounterValues reads the runner's counters by field name.
func ctCounterValues(m *Metrics) map[string]float64 {
	cs := map[string]prometheus.Collector{
		"fetched": m.fetched, "processed": m.processed, "acked": m.acked, "nacked": m.nacked,
		"terminated": m.terminated, "deadLettered": m.deadLettered, "permanentUnacked": m.permanentUnacked,
		"redeliveries": m.redeliveries, "maxDeliverExhausted": m.maxDeliverExhausted,
		"receiptsPublished": m.receiptsPublished, "receiptPublishErrors": m.receiptPublishErrors,
		"dlqPublishErrors": m.dlqPublishErrors,
		"ackConfAttempts":  m.ackConfAttempts, "ackConfSuccesses": m.ackConfSuccesses,
		"ackConfTimeouts": m.ackConfTimeouts, "ackConfFailures": m.ackConfFailures,
		"ackConfUnsupported": m.ackConfUnsupported,
	}
	out := make(map[string]float64, len(cs))
	for k, c := range cs {
		out[k] = testutil.ToFloat64(c)
	}
	return out
}

// ctCounters checks counters by field name.
func ctCounters(t *testing.T, m *Metrics, want map[string]float64) {
	t.Helper()
	got := ctCounterValues(m)
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("no counter %q", k)
			continue
		}
		if g != w {
			t.Errorf("counter %s = %v, want %v", k, g, w)
		}
	}
}

// ctHistCount is a histogram's sample count.
func ctHistCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
