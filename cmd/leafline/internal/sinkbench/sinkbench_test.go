//go:build unix

package sinkbench

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/pgtest"
)

// TestMain lets the test binary serve as the exec row's worker.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == EchoWorkerArg {
		if err := RunEchoWorker(os.Stdin, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var benchEvents = flag.Int("bench.events", 20000, "BenchmarkSinks: backlog each sink drains")

// BenchmarkSinks runs `leafline bench` once (-benchtime 1x) with a real
// PostgreSQL for the postgres row, and reports each sink's events/s:
//
//	go test ./internal/bench -run '^$' -bench Sinks -benchtime 1x
func BenchmarkSinks(b *testing.B) {
	srv := pgtest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	for b.Loop() {
		rows, err := Run(ctx, Options{Events: *benchEvents, PostgresDSN: srv.DSN()})
		Print(os.Stdout, rows)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rows {
			if r.Skipped == "" {
				b.ReportMetric(r.EPS, strings.ReplaceAll(r.Sink, "-", "_")+"_events/s")
			}
		}
	}
}

// TestSinks runs every row on a small backlog: each sink drains it whole.
func TestSinks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a system per sink; skipped with -short")
	}
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows, err := Run(ctx, Options{Events: 300, PostgresDSN: srv.DSN()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(Names) {
		t.Fatalf("%d rows, want %d", len(rows), len(Names))
	}
	for _, r := range rows {
		if r.Skipped != "" || r.EPS <= 0 || r.Events != 300 {
			t.Errorf("row %+v", r)
		}
	}
	var out strings.Builder
	Print(&out, rows)
	if !strings.Contains(out.String(), "bench sinks store_eps=") {
		t.Errorf("no bench line:\n%s", out.String())
	}
}
