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
	log = log.With("sink", cfg.Type)
	switch cfg.Type {
	case "", "store":
		return Opened{TxSink: StoreSink{}}, nil
	case "file":
		fs, err := NewFileSink(cfg.Dir)
		if err != nil {
			return Opened{}, err
		}
		return Opened{Sink: fs}, nil
	}
	return Opened{}, fmt.Errorf("sink.type: unknown sink type %q", cfg.Type)
}
