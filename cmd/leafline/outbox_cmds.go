package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"time"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/topology"
)

// outboxLockTimeout is how long the outbox tools wait for the file lock. A
// running box holds it for its whole life, so waiting longer helps nobody.
const outboxLockTimeout = time.Second

// cmdOutbox dispatches "leafline outbox check|inspect".
func cmdOutbox(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		outboxUsage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch args[0] {
	case "check":
		return cmdOutboxCheck(ctx, args[1:], stdout, stderr)
	case "inspect":
		return cmdOutboxInspect(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "leafline outbox: unknown subcommand %q\n\n", args[0])
	outboxUsage(stderr)
	return exitUsage
}

func outboxUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: leafline outbox SUBCOMMAND --config FILE")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  check   --config FILE           verify <data_dir>/outbox.db; exit 1 if it is damaged")
	fmt.Fprintln(w, "  inspect --config FILE [--json]  pending and published receipts, oldest pending")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The edge box must be stopped: it holds the file lock while it runs.")
}

// cmdOutboxCheck opens the edge's outbox (which validates its structure)
// and runs the full Check: exit 0 when intact, 1 when damaged, locked or
// missing, 2 on a usage or configuration error.
func cmdOutboxCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("outbox check", stderr)
	path := fs.String("config", "", "edge box config `FILE`")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	ob, code := openOutboxForTool(fs.Name(), *path, stderr)
	if ob == nil {
		return code
	}
	defer ob.Close()
	if err := ob.Check(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitFailure
	}
	st, err := ob.Stats()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "%s: ok (%d pending, %d published)\n", ob.Path(), st.Pending, st.Published)
	return exitOK
}

// outboxReport is the output of "leafline outbox inspect".
type outboxReport struct {
	Path              string     `json:"path"`
	Pending           int        `json:"pending"`
	Published         int        `json:"published"`
	OldestPending     *time.Time `json:"oldest_pending,omitempty"` // nil when nothing is pending
	OldestPendingAgeS float64    `json:"oldest_pending_age_s,omitempty"`
}

// cmdOutboxInspect prints the outbox counters and the age of the oldest
// pending receipt.
func cmdOutboxInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("outbox inspect", stderr)
	path := fs.String("config", "", "edge box config `FILE`")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	ob, code := openOutboxForTool(fs.Name(), *path, stderr)
	if ob == nil {
		return code
	}
	defer ob.Close()
	st, err := ob.Stats()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return exitFailure
	}
	rep := outboxReport{Path: ob.Path(), Pending: st.Pending, Published: st.Published}
	if !st.OldestPending.IsZero() {
		t := st.OldestPending.UTC()
		rep.OldestPending = &t
		age := time.Since(t)
		rep.OldestPendingAgeS = age.Seconds()
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return exitOK
	}
	fmt.Fprintf(stdout, "outbox:          %s\n", rep.Path)
	fmt.Fprintf(stdout, "pending:         %d\n", rep.Pending)
	fmt.Fprintf(stdout, "published:       %d\n", rep.Published)
	if rep.OldestPending != nil {
		fmt.Fprintf(stdout, "oldest pending:  %s (%s ago)\n", rep.OldestPending.Format(time.RFC3339),
			time.Duration(rep.OldestPendingAgeS*float64(time.Second)).Round(time.Second))
	} else {
		fmt.Fprintf(stdout, "oldest pending:  none\n")
	}
	return exitOK
}

// openOutboxForTool loads the config and opens its edge's outbox without
// ever creating one. On failure it prints why and returns a nil Outbox and
// the exit code.
func openOutboxForTool(name, cfgPath string, stderr io.Writer) (*outbox.Outbox, int) {
	fs := newFlags(name, stderr)
	cfg, ok := loadConfig(fs, cfgPath, stderr)
	if !ok {
		return nil, exitUsage
	}
	if site, _ := cfg.Topology.Site(cfg.Site); site == nil || site.Role != topology.RoleEdge {
		role := "unknown"
		if site != nil {
			role = string(site.Role)
		}
		fmt.Fprintf(stderr, "%s: site %s has role %s; only edge boxes have an outbox\n", name, cfg.Site, role)
		return nil, exitUsage
	}
	path := filepath.Join(cfg.DataDir, "outbox.db")
	// outbox.Open creates a missing file; a tool must never do that.
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			fmt.Fprintf(stderr, "%s: %s does not exist (has this edge box ever run with data_dir %s?)\n", name, path, cfg.DataDir)
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
		return nil, exitFailure
	}
	ob, err := outbox.Open(path, outbox.Options{OpenTimeout: outboxLockTimeout})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			fmt.Fprintf(stderr, "%s: %s is locked by another process: stop the edge box first (%v)\n", name, path, err)
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
		return nil, exitFailure
	}
	return ob, exitOK
}
