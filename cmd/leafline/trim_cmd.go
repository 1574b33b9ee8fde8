package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/edge"
)

// cmdTrim deletes from a stock-server site's streams what their takers
// have ACKed (edge.Trim), once or every --every until interrupted: a box
// that leafline runs does this itself.
func cmdTrim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("trim", stderr)
	path := fs.String("config", "", "the site's box config `FILE` (names the site and the topology)")
	server := fs.String("server", "", "the site's NATS `URL` (default: the config's nats.listen)")
	creds := fs.String("creds", "", "a .creds `FILE` to authenticate with")
	every := fs.Duration("every", 0, "trim again after each `INTERVAL` until interrupted (0: once)")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	if *every < 0 {
		fmt.Fprintf(stderr, "%s: --every: must not be negative, got %s\n", fs.Name(), *every)
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok {
		return exitUsage
	}
	var opts []nats.Option
	if *creds != "" {
		opts = append(opts, nats.UserCredentials(*creds))
	}
	nc, js, err := connect(cfg, *server, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitFailure
	}
	defer nc.Close()
	for {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		done, err := edge.Trim(tctx, js, cfg)
		cancel()
		for _, d := range done {
			if *every == 0 || d.Msgs > 0 {
				fmt.Fprintf(stdout, "%s: site %s: stream %s: %d messages deleted\n", fs.Name(), cfg.Site, d.Stream, d.Msgs)
			}
		}
		switch {
		case err != nil && *every == 0:
			fmt.Fprintf(stderr, "%s: site %s: %v\n", fs.Name(), cfg.Site, err)
			return exitFailure
		case err != nil:
			fmt.Fprintf(stderr, "%s: site %s: %v (trying again in %s)\n", fs.Name(), cfg.Site, err, *every)
		case *every == 0:
			return exitOK
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(*every):
		}
	}
}
