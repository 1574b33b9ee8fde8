package box

import (
	"errors"

	"github.com/nats-io/nats.go"
)

// natsErrors routes the asynchronous errors of one of the box's own
// connections to the box log and leafline_nats_client_errors_total, where
// nats.go would write them to stderr. The one that matters is a slow
// consumer: the client dropped messages it could not hand over in time,
// and the server delivers them again after their AckWait, so the log names
// the connection and the subscription's subject (never a payload).
func (a *App) natsErrors() nats.Option {
	return nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		kind := "other"
		if errors.Is(err, nats.ErrSlowConsumer) {
			kind = "slow_consumer"
		}
		a.metrics.natsErrors.WithLabelValues(kind).Inc()
		attrs := []any{"connection", nc.Opts.Name, "kind", kind, "err", err}
		if sub != nil {
			attrs = append(attrs, "subject", sub.Subject)
		}
		a.log.Warn("nats client error", attrs...)
	})
}
