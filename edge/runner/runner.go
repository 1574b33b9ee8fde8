package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/eventid"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// ErrOversize means a message is larger than delivery.max_message_bytes. It
// is permanent.
var ErrOversize = fmt.Errorf("%w: message too large", sink.ErrPermanent)

// ErrFatal marks an error after which the box must stop (a bbolt commit
// error): state is not retried in place; the supervisor restarts the box.
var ErrFatal = errors.New("fatal")

// Options are what a Runner needs. Config, Site, Consumer, Outbox, one
// Publisher and one of Sink and TxSink are required.
type Options struct {
	Config *topology.Config
	Site   string
	// NC is the connection the consumer's messages belong to (a confirmed
	// AckTerm is a request on it). JS publishes the DLQ records.
	NC *nats.Conn
	JS jetstream.JetStream
	// Consumer is the durable pull consumer the runner fetches from.
	Consumer jetstream.Consumer
	// Classes are the consumers of the edge's priority classes, most
	// urgent first: each batch comes from the first with messages, and
	// Consumer's messages after theirs (see the package doc, # Priority
	// classes).
	Classes []jetstream.Consumer
	// ReceiptClasses are the classes whose receipts go in lanes of their
	// own (topology.Topology.ReceiptClasses of the edge).
	ReceiptClasses []string
	Outbox         *outbox.Outbox
	// Publishers publish the receipts to the local receipts stream, each a
	// batch at a time. A second publisher on a connection of its own lets
	// two batches' atomic publishes overlap: the server stages one atomic
	// batch per connection at a time. At least one is required.
	Publishers []outbox.Publisher
	// Sink writes outside the outbox transaction; TxSink inside it.
	// Exactly one is set.
	Sink   sink.Sink
	TxSink sink.TxSink
	// Progress is the InProgress heartbeat interval; zero sends none.
	Progress time.Duration
	// Metrics are counted into; a nil field counts nowhere.
	Metrics Metrics
	// Log is the runner's logger; nil means slog.Default().
	Log *slog.Logger
	// Wrote, if set, is signalled without blocking after each outbox
	// transaction (the box then releases the outbox pages it mapped).
	Wrote chan<- struct{}
	// Hooks are for tests and benchmarks; the zero value is production.
	Hooks Hooks
}

// Hooks let tests and benchmarks watch and hold the runner. A nil field
// does nothing.
type Hooks struct {
	// Gate, if set, holds Run until it is closed (a benchmark preloads a
	// backlog first).
	Gate <-chan struct{}
	// Trace is called with each step of the delivery contract a message
	// passes ("sink_commit", "outbox_commit", "receipt_puback", "ack" ...),
	// on the runner's goroutines.
	Trace func(step string, eventID string, meta *jetstream.MsgMetadata)
	// OnBatch is called on the committer's goroutine with each batch's
	// stage times once it is finished.
	OnBatch func(BatchTimes)
	// WrapPublisher, if set, wraps the first publisher, which then
	// publishes every batch alone (fault injection).
	WrapPublisher func(outbox.Publisher) outbox.Publisher
}

// Metrics are the counters the runner adds to. A nil field counts nowhere.
// PoisonEvents counts the events dead-lettered as worker_crash (see
// sink.ErrWorkerCrash), each once, when its DLQ record is PubAck'ed.
type Metrics struct {
	Fetched, Processed, Acked, Nacked, Terminated, DeadLettered prometheus.Counter
	// Expired counts the events not processed because they were older
	// than their expiry, each once, when its expired receipt is ACKed.
	Expired                                                   prometheus.Counter
	PermanentUnacked, Redeliveries, MaxDeliverExhausted       prometheus.Counter
	ReceiptsPublished, ReceiptPublishErrors, DLQPublishErrors prometheus.Counter
	EventIDReused                                             prometheus.Counter
	PoisonEvents                                              prometheus.Counter
	AckConfAttempts, AckConfSuccesses                         prometheus.Counter
	AckConfTimeouts, AckConfFailures                          prometheus.Counter
	SinkSeconds, PubAckSeconds, AckConfSeconds                prometheus.Observer
}

// setDefaults points every nil field at a counter nobody reads.
func (m *Metrics) setDefaults() {
	for _, c := range []*prometheus.Counter{&m.Fetched, &m.Processed, &m.Acked, &m.Nacked, &m.Terminated,
		&m.DeadLettered, &m.Expired, &m.PermanentUnacked, &m.Redeliveries, &m.MaxDeliverExhausted, &m.ReceiptsPublished,
		&m.ReceiptPublishErrors, &m.DLQPublishErrors, &m.EventIDReused, &m.PoisonEvents, &m.AckConfAttempts,
		&m.AckConfSuccesses, &m.AckConfTimeouts, &m.AckConfFailures} {
		if *c == nil {
			*c = prometheus.NewCounter(prometheus.CounterOpts{Name: "unused"})
		}
	}
	for _, o := range []*prometheus.Observer{&m.SinkSeconds, &m.PubAckSeconds, &m.AckConfSeconds} {
		if *o == nil {
			*o = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "unused"})
		}
	}
}

// Runner is the edge's sink runner (see the package documentation). Make
// one with New and call Run once.
type Runner struct {
	cfg     *topology.Config
	site    string
	nc      *nats.Conn
	js      jetstream.JetStream
	cons    jetstream.Consumer
	classes []jetstream.Consumer
	// receiptClasses: Options.ReceiptClasses.
	receiptClasses []string
	ob             *outbox.Outbox
	pubs           []outbox.Publisher
	sink           sink.Sink
	txSink         sink.TxSink
	eventID        func(jetstream.Msg) (string, error)
	backoff        func(delivered uint64) time.Duration
	metrics        Metrics
	log            *slog.Logger
	hooks          Hooks
	// progress is the InProgress interval (zero: none).
	progress time.Duration
	wrote    chan<- struct{}
}

// New checks o and prepares a Runner. It starts nothing.
func New(o Options) (*Runner, error) {
	switch {
	case o.Config == nil || o.Config.Topology == nil:
		return nil, errors.New("runner: no configuration")
	case o.Site == "":
		return nil, errors.New("runner: no site")
	case o.Consumer == nil || o.Outbox == nil:
		return nil, errors.New("runner: a consumer and an outbox are required")
	case len(o.Publishers) == 0 || o.Publishers[0] == nil:
		return nil, errors.New("runner: a receipt publisher is required")
	case (o.Sink == nil) == (o.TxSink == nil):
		return nil, errors.New("runner: exactly one of Sink and TxSink is required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.Metrics.setDefaults()
	pubs := o.Publishers
	if o.Hooks.WrapPublisher != nil {
		pubs = []outbox.Publisher{o.Hooks.WrapPublisher(pubs[0])}
	}
	return &Runner{
		cfg: o.Config, site: o.Site, nc: o.NC, js: o.JS, cons: o.Consumer, classes: o.Classes, ob: o.Outbox,
		receiptClasses: o.ReceiptClasses,
		pubs:           pubs, sink: o.Sink, txSink: o.TxSink,
		eventID: permanentEventID(o.Config.EventID),
		backoff: Backoff(o.Config.Delivery.Retry),
		metrics: o.Metrics, log: o.Log, hooks: o.Hooks,
		progress: o.Progress, wrote: o.Wrote,
	}, nil
}

// permanentEventID reads a message's event_id as the config says; a
// message without a usable one is a permanent failure (dead-lettered,
// never retried).
func permanentEventID(c topology.EventIDConfig) func(jetstream.Msg) (string, error) {
	read := eventid.Extractor(c.JSONField, c.Header, c.MaxLength)
	return func(m jetstream.Msg) (string, error) {
		id, err := read(m)
		if err != nil {
			return "", fmt.Errorf("%w: %w", sink.ErrPermanent, err)
		}
		return id, nil
	}
}

// Consumer is the consumer the runner fetches from.
func (r *Runner) Consumer() jetstream.Consumer { return r.cons }

// ReceiptRecord is the outbox record of the receipt the runner writes for
// eventID, an event of no class, with status: what a redelivery of the
// event finds stored.
func (r *Runner) ReceiptRecord(eventID string, status receipt.Status, reason string) (outbox.Record, error) {
	return r.digestReceiptRecord(eventID, "", status, reason, "")
}

// maxRetryAfter bounds the delay a sink's target may ask for, so that a
// target that asks for hours cannot park a message beyond what an operator
// would look for.
const maxRetryAfter = 5 * time.Minute

// publishDepth is how many committed batches may be with the publishers
// (publishing, queued to publish, or published and not yet finished).
const publishDepth = 3

// item is one message of a batch on its way through the runner.
type item struct {
	msg  jetstream.Msg
	meta *jetstream.MsgMetadata
	ev   sink.Event
	// err is why the message did not succeed; nil means success so far.
	err error
	// dead: its DLQ record was PubAck'ed (err holds the permanent cause);
	// newDead: by this delivery (not by an earlier one).
	dead, newDead bool
	// deadline is when the event expires, when expires is set (see
	// receipt.Deadline); expired: it was not handed to the sink, and rec
	// is its expired receipt.
	deadline         time.Time
	expires, expired bool
	// hold is a failure after which the message must not be ACKed or
	// terminated at all (DLQ publish or receipt publish failed).
	hold error
	// rec is its receipt (processed, dead_lettered when dead, expired
	// when expired).
	rec    outbox.Record
	hasRec bool
	// digest is receipt.PayloadDigest of its payload (set with rec).
	digest string
}

// batch is one fetched batch on its way through the runner's pipeline. It
// is owned by one goroutine at a time; the channels between them hand it on.
type batch struct {
	items []item
	// stopProgress stops the batch's InProgress heartbeats (idempotent).
	stopProgress func()
	// withRec indexes the items whose receipt was committed.
	withRec []int
	// pending are the receipts that a publisher publishes (stored pending
	// by this or an earlier delivery), each once; publishing indexes the
	// items whose receipt is among them.
	pending    []outbox.Record
	publishing []int
	// first[i]: pending[i] was stored by this batch's commit, so it was
	// never published before (see FirstPublisher).
	first []bool
	// published: pending were all PubAck'ed.
	published bool
	// acked: of pending, those PubAck'ed by a publish that failed for
	// others. They are marked all the same, so that the relay does not
	// publish them again; the batch is held as when none was.
	acked []outbox.Record
	// permitted: the fetcher got this batch's permit to fetch the next one.
	permitted bool
	times     BatchTimes
}

// BatchTimes are a batch's stage times (zero when a stage did not happen).
type BatchTimes struct {
	Messages int
	Asked    int       // the fetch asked for this many
	Fetch    time.Time // the fetch that returned the batch began
	Fetched  time.Time // fetched and decoded
	Commit   time.Time // the committer took it
	Durable  time.Time // its outbox commit returned
	PubAck   time.Time // its receipts were PubAck'ed
	Marked   time.Time // its receipts were marked published
	Done     time.Time // its final acknowledgements were sent
}

// errMaxDeliver marks a temporary failure on the last delivery the consumer
// allows, when delivery.max_deliver_action is dead_letter.
var errMaxDeliver = fmt.Errorf("%w: max deliveries reached", sink.ErrPermanent)

// Run fetches and processes batches until ctx is done. Every batch fetched
// is finished (or abandoned unacked) before run returns, even when ctx is
// cancelled meanwhile: its publishes and ACKs are bounded by their own
// timeouts. Shutdown never ACKs work that did not complete, and nothing is
// fetched after ctx is done. run returns nil on a clean stop, or the first
// fatal error. Call it once.
func (r *Runner) Run(ctx context.Context) error {
	if r.hooks.Gate != nil {
		select {
		case <-r.hooks.Gate:
		case <-ctx.Done():
			return nil
		}
	}
	fctx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	permit := make(chan struct{}, 1)
	permit <- struct{}{}
	fetched := make(chan *batch)
	go r.fetch(fctx, permit, fetched)
	err := r.commitLoop(context.WithoutCancel(ctx), fetched, permit)
	if err != nil {
		// Fatal: whatever the fetcher still holds is left unacked.
		stopFetch()
		for b := range fetched {
			r.abandon(b)
		}
	}
	return err
}

func (r *Runner) step(name string, it *item) {
	if r.hooks.Trace != nil {
		r.hooks.Trace(name, it.ev.ID, it.meta)
	}
}
