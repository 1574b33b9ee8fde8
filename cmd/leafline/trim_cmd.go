package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/leafline/leafline/jsplan"
)

// cmdTrim deletes from a stock-server site's streams what their takers
// have ACKed (jsplan.Trim), once or every --every until interrupted: a box
// that leafline runs does this itself.
func cmdTrim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("trim", stderr)
	sf := addSiteFlags(fs)
	every := fs.Duration("every", 0, "trim again after each `INTERVAL` until interrupted (0: once)")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	if *every < 0 {
		fmt.Fprintf(stderr, "%s: --every: must not be negative, got %s\n", fs.Name(), *every)
		return exitUsage
	}
	cfg, nc, js, code := sf.open(fs, stderr)
	if code != exitOK {
		return code
	}
	defer nc.Close()
	if w, ok := jsplan.ServerVersionWarning(nc.ConnectedServerVersion()); ok {
		fmt.Fprintf(stderr, "%s: warning: %s\n", fs.Name(), w)
	}
	for {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		done, err := jsplan.Trim(tctx, js, cfg)
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
