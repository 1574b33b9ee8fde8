package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/l1"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"
)

// cmdCleanup shows what the L1 cleanup policy would delete now (--dry-run)
// or runs one pass of it (--once).
func cmdCleanup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cleanup", stderr)
	sf := addSiteFlags(fs)
	dry := fs.Bool("dry-run", false, "list what the policy would delete now; delete nothing")
	once := fs.Bool("once", false, "run one cleanup pass: an audit record, then the delete, for each eligible message")
	asJSON := fs.Bool("json", false, "print the pass's report as JSON")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	if *dry == *once {
		fmt.Fprintf(stderr, "%s: give exactly one of --dry-run and --once\n", fs.Name())
		return exitUsage
	}
	cl, nc, code := openCleaner(fs, sf, "leafline cleanup --once", *once, stderr)
	if code != exitOK {
		return code
	}
	defer nc.Close()
	if *once {
		if err := cl.Setup(ctx); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
			return exitFailure
		}
	}
	rep, err := cl.Pass(ctx, *dry, time.Now())
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printCleanupReport(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitFailure
	}
	return exitOK
}

// openCleaner loads an L1 config, connects, and builds its cleaner; one
// that deletes must be enabled by the config.
func openCleaner(fs *flag.FlagSet, sf siteFlags, who string, deletes bool, stderr io.Writer) (*cleanup.Cleaner, *nats.Conn, int) {
	cfg, ok := loadConfig(fs, *sf.path, stderr)
	if !ok || !requireL1(fs.Name(), *sf.path, *sf.server, cfg, stderr) {
		return nil, nil, exitUsage
	}
	if deletes && !cfg.Completion.Cleanup.On() {
		fmt.Fprintf(stderr, "%s: completion.cleanup.enabled is false in %s: the policy is off, nothing may be deleted (--dry-run shows what it would delete)\n", fs.Name(), *sf.path)
		return nil, nil, exitUsage
	}
	_, nc, js, code := sf.open(fs, stderr)
	if code != exitOK {
		return nil, nil, code
	}
	// The records are the running L1 box's: ask its status service.
	cl, err := l1.NewCleaner(cfg, js, status.NewStatusClient(nc, ""), who, newLogger(cfg.Log, stderr))
	if err == nil {
		return cl, nc, exitOK
	}
	nc.Close()
	fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
	return nil, nil, exitFailure
}

func printCleanupReport(w io.Writer, r cleanup.CleanupReport) {
	verb := "deleted"
	n := r.Deleted
	if r.DryRun {
		verb, n = "would delete", r.Eligible
	}
	fmt.Fprintf(w, "examined %d origin messages; %s %d (%d bytes)", r.Examined, verb, n, r.Bytes)
	if !r.Oldest.IsZero() {
		fmt.Fprintf(w, ", oldest stored %s", r.Oldest.UTC().Format("2006-01-02T15:04:05Z"))
	}
	fmt.Fprintln(w)
	for _, k := range slices.Sorted(maps.Keys(r.Subjects)) {
		fmt.Fprintf(w, "  subject %-30s %d\n", k, r.Subjects[k])
	}
	for _, k := range slices.Sorted(maps.Keys(r.Sites)) {
		fmt.Fprintf(w, "  site    %-30s %d\n", k, r.Sites[k])
	}
	for _, k := range slices.Sorted(maps.Keys(r.Skipped)) {
		fmt.Fprintf(w, "  kept    %-30s %d\n", k, r.Skipped[k])
	}
}

// cmdAudit prints the audit records of an event's deleted origin messages.
func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("audit", stderr)
	sf := addSiteFlags(fs)
	if !parse(fs, args, 1, stderr) {
		return exitUsage
	}
	eid := fs.Arg(0)
	if err := receipt.ValidateEventID(eid); err != nil {
		fmt.Fprintf(stderr, "%s: EVENT_ID: %v\n", fs.Name(), err)
		return exitUsage
	}
	cl, nc, code := openCleaner(fs, sf, "leafline audit", false, stderr)
	if code != exitOK {
		return code
	}
	defer nc.Close()
	ents, err := cl.Audit(ctx, eid)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitFailure
	}
	if len(ents) == 0 {
		fmt.Fprintf(stderr, "%s: no audit record for event_id %q: its origin message was not deleted by the cleanup\n", fs.Name(), eid)
		return exitFailure
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.Encode(ents)
	return exitOK
}
