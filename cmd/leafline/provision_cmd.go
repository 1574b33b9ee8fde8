package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/edge"
)

// cmdProvision creates, or updates in place, a site's streams and consumers
// on a server leafline does not run (a stock nats-server started from
// `leafline topology render`), then lints them as they are on that server.
// Like the box, it never deletes, recreates or purges anything: an
// incompatible existing stream stops it with the reason.
func cmdProvision(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("provision", stderr)
	path := fs.String("config", "", "the site's box config `FILE` (names the site and the topology)")
	server := fs.String("server", "", "the site's NATS `URL` (default: the config's nats.listen)")
	creds := fs.String("creds", "", "a .creds `FILE` to authenticate with")
	lintOnly := fs.Bool("lint-only", false, "change nothing; only report what the live streams lack")
	if !parse(fs, args, 0, stderr) {
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
	url := nc.ConnectedUrlRedacted()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !*lintOnly {
		if err := edge.Provision(ctx, js, cfg); err != nil {
			fmt.Fprintf(stderr, "%s: site %s: %v\n", fs.Name(), cfg.Site, err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "%s: site %s: streams and consumers provisioned on %s\n", fs.Name(), cfg.Site, url)
	}
	warnings, err := edge.LiveWarnings(ctx, js, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s: site %s: reading the live streams: %v\n", fs.Name(), cfg.Site, err)
		return exitFailure
	}
	for _, w := range warnings {
		fmt.Fprintf(stdout, "%s: warning: %s\n", fs.Name(), w)
	}
	if *lintOnly && len(warnings) > 0 {
		return exitFailure
	}
	return exitOK
}
