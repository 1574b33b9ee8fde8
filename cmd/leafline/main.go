// Command leafline runs a leafline box (edge, hub or L1) and its tools.
//
//	leafline demo [--events N] [--cut D]      all three sites in one process
//	leafline run --config FILE                run the box the config describes
//	leafline check --config FILE              validate config and topology, then exit
//	leafline publish --config FILE [...]      publish events at L1
//	leafline status --config FILE EVENT_ID    an event's completion record at L1
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
