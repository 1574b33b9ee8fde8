package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/leafline/leafline/internal/bench"
)

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", stderr)
	events := fs.Int("events", 20000, "backlog each sink drains")
	size := fs.Int("size", 256, "event payload `bytes`")
	sinks := fs.String("sinks", strings.Join(bench.SinkNames, ","), "comma-separated rows: "+strings.Join(bench.SinkNames, ", "))
	dsnEnv := fs.String("postgres-dsn-env", "", "environment `VAR` holding a PostgreSQL connection string for the postgres row (unset: the row is skipped)")
	dir := fs.String("dir", "", "keep the boxes' data under `DIR` (default: a temp dir, removed)")
	verbose := fs.Bool("v", false, "log the boxes' warnings")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: leafline bench [flags]")
		fmt.Fprintln(stderr, "\nMeasures each sink on this machine: an edge box (with L1 and a hub, in this")
		fmt.Fprintln(stderr, "process, SyncAlways) drains a backlog through the sink into a trivial target.")
		fmt.Fprintln(stderr, "Prints a table and a final `bench sinks …` line.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "leafline bench: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *events < 100 || *events > 10_000_000 {
		fmt.Fprintf(stderr, "leafline bench: --events must be 100..10000000, got %d\n", *events)
		return exitUsage
	}
	if *size < 16 || *size > 1<<20 {
		fmt.Fprintf(stderr, "leafline bench: --size must be 16..1048576, got %d\n", *size)
		return exitUsage
	}
	o := bench.SinkOptions{Events: *events, Size: *size, Dir: *dir, Progress: stderr}
	for _, s := range strings.Split(*sinks, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.Sinks = append(o.Sinks, s)
		}
	}
	if *dsnEnv != "" {
		v, ok := os.LookupEnv(*dsnEnv)
		if !ok || v == "" {
			fmt.Fprintf(stderr, "leafline bench: --postgres-dsn-env: environment variable %s is unset or empty\n", *dsnEnv)
			return exitUsage
		}
		o.PostgresDSN = v
	}
	if *verbose {
		o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rows, err := bench.Sinks(ctx, o)
	bench.PrintSinks(stdout, rows)
	if err != nil {
		fmt.Fprintf(stderr, "leafline bench: %v\n", err)
		return exitFailure
	}
	return exitOK
}
