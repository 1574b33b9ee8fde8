package sink

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/topology"
)

// Deps are what a configured sink may take from the box that runs it.
type Deps struct {
	// NC is a connection to the box's own NATS server (the nats sink).
	NC *nats.Conn
	// Log is the box's logger; nil means slog.Default().
	Log *slog.Logger
	// Count is where the sink counts what befalls its target; the zero
	// value counts nothing.
	Count Counters
}

// Counters are called as things befall a sink's target, for the box's
// metrics. A nil field counts nothing; a set one must not block.
type Counters struct {
	// TargetCrash: an exec worker exited by itself (not stopped by the
	// sink), or an http target reset or closed the connection of a request
	// before its answer.
	TargetCrash func()
	// WorkerRestart: the exec sink started a worker again after one ended.
	WorkerRestart func()
}

func (c Counters) targetCrash() {
	if c.TargetCrash != nil {
		c.TargetCrash()
	}
}

func (c Counters) workerRestart() {
	if c.WorkerRestart != nil {
		c.WorkerRestart()
	}
}

// Opened is the sink a box config names: exactly one of Sink and TxSink is
// set. Close releases what the sink holds (a worker process, a connection
// pool); the box calls it once it has stopped writing.
type Opened struct {
	Sink   Sink
	TxSink TxSink
	closer io.Closer
}

// Close releases the sink's resources. It is safe to call more than once.
func (o Opened) Close() error {
	if o.closer == nil {
		return nil
	}
	return o.closer.Close()
}

// Open builds the sink cfg names (cfg must have passed validation and had
// its defaults set). It reads the files and environment variables the
// sink needs, and starts a worker process for exec, but it does not wait
// for any target to be reachable: a box starts while its target is down,
// and keeps the events until it is back.
func Open(cfg topology.SinkConfig, d Deps) (Opened, error) {
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	switch cfg.Type {
	case "", "store":
		return Opened{TxSink: StoreSink{}}, nil
	case "file":
		fs, err := NewFileSink(cfg.Dir)
		if err != nil {
			return Opened{}, err
		}
		return Opened{Sink: fs}, nil
	case "http":
		if cfg.HTTP == nil {
			return Opened{}, fmt.Errorf("sink.http: required for the http sink")
		}
		s, err := newHTTP(*cfg.HTTP, log, d.Count)
		return opened(s, err)
	case "exec":
		if cfg.Exec == nil {
			return Opened{}, fmt.Errorf("sink.exec: required for the exec sink")
		}
		s, err := newExec(*cfg.Exec, log, d.Count)
		return opened(s, err)
	case "postgres":
		if cfg.Postgres == nil {
			return Opened{}, fmt.Errorf("sink.postgres: required for the postgres sink")
		}
		s, err := NewPostgres(*cfg.Postgres, log)
		return opened(s, err)
	case "nats":
		if cfg.NATS == nil {
			return Opened{}, fmt.Errorf("sink.nats: required for the nats sink")
		}
		s, err := NewNATS(d.NC, *cfg.NATS, log)
		return opened(s, err)
	}
	return Opened{}, fmt.Errorf("sink.type: unknown sink type %q", cfg.Type)
}

// closingSink is a sink that holds something to release.
type closingSink interface {
	Sink
	io.Closer
}

func opened[S closingSink](s S, err error) (Opened, error) {
	if err != nil {
		return Opened{}, err
	}
	return Opened{Sink: s, closer: s}, nil
}
