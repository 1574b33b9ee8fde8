//go:build linux

package bench

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	leaflineOnly      = flag.String("leafline.only", "", "BenchmarkLeafline: comma-separated phases (default all)")
	leaflineBacklog   = flag.Int("leafline.backlog", 0, "BenchmarkLeafline: runner backlog (0: the default)")
	leaflineE2E       = flag.Int("leafline.e2e", 0, "BenchmarkLeafline: end-to-end events (0: the default)")
	leaflineDrain     = flag.Int("leafline.drain", 0, "BenchmarkLeafline: drain receipts (0: the default)")
	leaflineTransport = flag.String("leafline.transport", "sourcing", "BenchmarkLeafline: comma-separated transports for f and e")
)

// BenchmarkLeafline runs the phases of `leafline bench` once and reports
// the figures of its bench line:
//
//	go test ./internal/bench -run '^$' -bench Leafline -benchtime 1x -timeout 60m
//
// Phase r runs a leafline binary built from ../.. (cmd/leafline).
func BenchmarkLeafline(b *testing.B) {
	o := Options{Backlog: *leaflineBacklog, E2E: *leaflineE2E, Drain: *leaflineDrain,
		Transports: strings.Split(*leaflineTransport, ","), Dir: b.TempDir(), Out: os.Stdout}
	if *leaflineOnly != "" {
		o.Phases = strings.Split(*leaflineOnly, ",")
	}
	if o.on("r") {
		o.RSSBin = filepath.Join(b.TempDir(), "leafline")
		if out, err := exec.Command("go", "build", "-o", o.RSSBin, "../..").CombinedOutput(); err != nil {
			b.Fatalf("go build: %v\n%s", err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	for b.Loop() {
		figs, err := Leafline(ctx, o)
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range figs {
			b.ReportMetric(f.Value, f.Name)
		}
	}
}
