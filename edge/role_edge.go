package edge

// The edge role: the sink runner, its outbox and receipt publishers.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// startEdge checks the outbox and builds the sink runner: its consumer,
// sink, and the two receipt publishers.
func (a *App) startEdge(ctx context.Context) error {
	cfg := a.cfg
	ob := a.ob // opened first, by start
	var err error
	// A full integrity check (record checksums included) before anything
	// is published from the file: a corrupt outbox stops the box with the
	// file named, and is never replaced by an empty one.
	if err := ob.Check(); err != nil {
		return err
	}
	if cfg.Signing.KeyFile != "" {
		if a.signer, err = loadSigner(cfg.Signing.KeyFile, a.site.ReceiptKey); err != nil {
			return err
		}
	}
	cons, err := a.sinkConsumer(ctx)
	if err != nil {
		return fmt.Errorf("sink consumer: %w", err)
	}
	// The server stages one atomic batch at a time per connection: a
	// second connection lets the runner's second publisher overlap its
	// batch with the first's (runner.Options.Publishers).
	if a.pubNC, err = nats.Connect("", nats.InProcessServer(a.srv), nats.Name("leafline-"+a.site.Name+"-receipts"),
		nats.MaxReconnects(-1), a.natsErrors()); err != nil {
		return fmt.Errorf("connect to embedded server: %w", err)
	}
	js2, err := jetstream.New(a.pubNC)
	if err != nil {
		return err
	}
	progress, err := inProgressInterval(cfg.Delivery, cons.CachedInfo().Config.AckWait)
	if err != nil {
		return err
	}
	ro := runner.Options{
		Config:   cfg,
		Site:     a.site.Name,
		NC:       sinkConn(cons, a.nc), // a direct consumer's own connection
		JS:       a.js,
		Progress: progress,
		Consumer: cons,
		Outbox:   ob,
		Publishers: []outbox.Publisher{
			&receiptPublisher{js: a.js, signer: a.signer},
			&receiptPublisher{js: js2, signer: a.signer},
		},
		Metrics: a.metrics.runner(),
		Log:     a.log.With("component", "runner"),
		Wrote:   a.wrote,
		Hooks:   a.opts.runnerHooks,
	}
	switch {
	case a.opts.sink != nil:
		ro.Sink = a.opts.sink
	case a.opts.txSink != nil:
		ro.TxSink = a.opts.txSink
	default:
		if a.opened, err = sink.Open(cfg.Sink, sink.Deps{NC: a.nc, Log: a.log, Count: a.metrics.sink()}); err != nil {
			return err
		}
		ro.Sink, ro.TxSink = a.opened.Sink, a.opened.TxSink
	}
	if a.run, err = runner.New(ro); err != nil {
		return err
	}
	if d, ok := cons.(*directConsumer); ok {
		a.opsDirect.Store(d)
	}
	return nil
}

// loadSigner reads the edge's nkey seed and checks that it is the key the
// topology publishes for this site, so that L1 will verify what it signs.
func loadSigner(path, want string) (nkeys.KeyPair, error) {
	seed, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing.key_file: %w", err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		return nil, fmt.Errorf("signing.key_file %s: not an nkey seed: %w", path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("signing.key_file %s: %w", path, err)
	}
	if pub != want {
		return nil, fmt.Errorf("signing.key_file %s: its public key %s is not this site's receipt_key %s in the topology", path, pub, want)
	}
	return kp, nil
}

// inProgressInterval is the InProgress heartbeat interval, checked against
// the consumer's real AckWait: a heartbeat must arrive well before the
// server would redeliver.
func inProgressInterval(d topology.DeliveryConfig, ackWait time.Duration) (time.Duration, error) {
	if !d.InProgress.Enabled {
		return 0, nil
	}
	iv := time.Duration(d.InProgress.IntervalMS) * time.Millisecond
	if iv == 0 {
		iv = ackWait / 3
	}
	if iv <= 0 || float64(iv) >= 0.8*float64(ackWait) {
		return 0, fmt.Errorf("delivery.in_progress.interval_ms: %s must be below 80%% of the consumer's AckWait (%s)", iv, ackWait)
	}
	return iv, nil
}
