package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/topology"
)

// cmdProvision creates, or updates in place, a site's streams and consumers
// on a server leafline does not run (a stock nats-server started from
// `leafline topology render`), then lints them as they are on that server.
// Like the box, it never deletes, recreates or purges anything: an
// incompatible existing stream stops it with the reason.
func cmdProvision(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("provision", stderr)
	sf := addSiteFlags(fs)
	lintOnly := fs.Bool("lint-only", false, "change nothing; only report what the live streams lack")
	serverConfig := fs.String("server-config", "", "also lint the site's nats-server configuration `FILE` (sync interval, JetStream domain, link users' permissions)")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	var confWarnings []topology.Warning
	if *serverConfig != "" {
		cfg, ok := loadConfig(fs, *sf.path, stderr)
		if !ok {
			return exitUsage
		}
		ws, unset, err := jsplan.ServerConfigWarnings(cfg, *serverConfig)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --server-config: %v\n", fs.Name(), err)
			return exitUsage
		}
		for _, name := range unset {
			fmt.Fprintf(stdout, "%s: note: %s references $%s, which is not set here: linted as if it were (set it where the server runs)\n",
				fs.Name(), *serverConfig, name)
		}
		confWarnings = ws
	}
	cfg, nc, js, code := sf.open(fs, stderr)
	if code != exitOK {
		return code
	}
	defer nc.Close()
	url := nc.ConnectedUrlRedacted()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !*lintOnly {
		if err := jsplan.Provision(ctx, js, cfg); err != nil {
			fmt.Fprintf(stderr, "%s: site %s: %v\n", fs.Name(), cfg.Site, err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "%s: site %s: streams and consumers provisioned on %s\n", fs.Name(), cfg.Site, url)
	}
	warnings, err := jsplan.LiveWarnings(ctx, js, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s: site %s: reading the live streams: %v\n", fs.Name(), cfg.Site, err)
		return exitFailure
	}
	warnings = append(confWarnings, warnings...)
	for _, w := range warnings {
		fmt.Fprintf(stdout, "%s: warning: %s\n", fs.Name(), w)
	}
	if *lintOnly && len(warnings) > 0 {
		return exitFailure
	}
	return exitOK
}

// siteFlags are the flags of a command that acts on a site's own server
// (provision, trim).
type siteFlags struct {
	path, server, creds *string
}

func addSiteFlags(fs *flag.FlagSet) siteFlags {
	return siteFlags{
		path:   fs.String("config", "", "the site's box config `FILE` (names the site and the topology)"),
		server: fs.String("server", "", "the site's NATS `URL` (default: the config's nats.listen)"),
		creds:  fs.String("creds", "", "a .creds `FILE` to authenticate with"),
	}
}

// open loads the config and connects to the site's server. On failure it
// has said why on stderr, and returns the exit code.
func (f siteFlags) open(fs *flag.FlagSet, stderr io.Writer) (*topology.Config, *nats.Conn, jetstream.JetStream, int) {
	cfg, ok := loadConfig(fs, *f.path, stderr)
	if !ok {
		return nil, nil, nil, exitUsage
	}
	var opts []nats.Option
	if *f.creds != "" {
		opts = append(opts, nats.UserCredentials(*f.creds))
	}
	nc, js, err := connect(cfg, *f.server, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return nil, nil, nil, exitFailure
	}
	return cfg, nc, js, exitOK
}
