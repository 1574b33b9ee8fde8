package edge

import (
	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/sink"
)

// Option adjusts an edge role made by New.
type Option func(*options)

type options struct {
	sink        sink.Sink
	txSink      sink.TxSink
	runnerHooks runner.Hooks
}

// WithRunnerHooks gives the edge's sink runner h: a gate that holds it,
// a trace of its contract steps, its batches' stage times, a wrapped
// receipt publisher. For tests and benchmarks; production sets none.
func WithRunnerHooks(h runner.Hooks) Option {
	return func(o *options) { o.runnerHooks = h }
}

// WithSink makes the edge hand its events to s instead of the sink its
// config names (sink.type and its section are then not used). s must keep
// the sink.Sink contract: idempotent by event_id, durable before Write
// returns. The box never closes s: the caller owns it, and may close it
// once Run has returned.
func WithSink(s sink.Sink) Option {
	return func(o *options) { o.sink, o.txSink = s, nil }
}

// WithTxSink makes the edge write its events with s inside the outbox's
// bbolt transaction, so that each business record and its receipt commit
// together (see sink.TxSink). It replaces the sink the config names.
func WithTxSink(s sink.TxSink) Option {
	return func(o *options) { o.sink, o.txSink = nil, s }
}
