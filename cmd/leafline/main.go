// Command leafline runs a leafline box (edge, hub or L1) and its tools.
//
//	leafline demo [--events N] [--cut D]      all three sites in one process
//	leafline run --config FILE                run the box the config describes
//	leafline check --config FILE              validate config and topology, then exit
//	leafline publish --config FILE [...]      publish events at L1
//	leafline status --config FILE EVENT_ID    an event's completion record at L1
//	leafline pending|summary|metrics --config FILE   L1's pending events, counts, a box's metrics
//	leafline topology render|permissions|certs       stock nats-server configs, permissions, PKI
//	leafline provision --config FILE           a site's streams on a stock nats-server, linted live
//	leafline outbox check|inspect --config FILE      verify or count an edge's outbox (box stopped)
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, done := serviceContext(ctx)
	code := run(ctx, os.Args[1:])
	done(code)
	stop()
	os.Exit(code)
}
