package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/leafline/leafline/cmd/leafline/internal/bench"
)

// TestBench_OnlyPrintsParsableLine runs `leafline bench --only z` (the
// disk's fsync ceiling, about four seconds) and checks that its last line
// is a bench line of name=value figures, after the estimate line, and
// that no progress is drawn when stderr is not a terminal; the figures
// themselves depend on the machine and are not checked.
func TestBench_OnlyPrintsParsableLine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the leafline phases read /proc and /sys: Linux only")
	}
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"bench", "--only", "z", "--dir", t.TempDir()}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	figs, err := bench.ParseLine(lines[len(lines)-1])
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(figs) == 0 || figs[0].Name != "fsync_eps" {
		t.Fatalf("figures %v, want fsync_eps first\n%s", figs, out.String())
	}
	if !strings.Contains(out.String(), "z16 ") {
		t.Errorf("no z16 row:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "\nbench: 1 phase, transports sourcing, about ") {
		t.Errorf("no estimate line:\n%s", out.String())
	}
	// stderr is no terminal here: no progress line.
	if strings.Contains(errb.String(), "bench: z disk fsync") {
		t.Errorf("progress on a non-terminal stderr:\n%s", errb.String())
	}
}

// TestBench_BadFlags: every bad phase, transport or size is named, and
// nothing runs.
func TestBench_BadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--only", "z,q"}, `unknown phase "q"`},
		{[]string{"--only", "e", "--transport", "carrier-pigeon"}, `unknown transport "carrier-pigeon"`},
		{[]string{"--only", "d", "--backlog", "-1"}, "backlog must be 0..10000000"},
		{[]string{"--only", "e", "--ids", "sequential"}, `ids "sequential"`},
		{[]string{"--only", "F", "--fleet-edges", "500"}, "fleet-edges must be 0..200"},
		{[]string{"--only", "l", "--cut-for", "-1s"}, "cut-for must be 0..1h"},
		{[]string{"--only", "wire", "--wire", "-5"}, "wire must be 0..10000000"},
		{[]string{"--only", "cap", "--cap-window", "500ms"}, "cap-window must be at least 1s"},
		{[]string{"--only", "cap", "--cap-window", "2h"}, "cap-window must be 0..1h"},
		{[]string{"--only", "F", "--full", "--fleet-edges", "500"}, "fleet-edges must be 0..200"},
		{[]string{"--only", "park", "--park-size", "8"}, "park-size must be 16..262144"},
		{[]string{"--only", "park", "--park-stream-mib", "8"}, "park-stream-mib must be 16..65536"},
		{[]string{"--only", "replace", "--replace-after", "-1"}, "replace-after must be 0..10000000"},
	} {
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), append([]string{"bench"}, tc.args...), &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errb.String(), tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: printed %q", tc.args, out.String())
		}
	}
}

// TestBench_RestoreAndFleetPrintParsableLine runs `leafline bench --only
// l,F` over the relay at tiny sizes (2 cuts, 2 edges of 50 events) and
// checks that the line carries the restore and fleet figures; the
// timings are not checked.
func TestBench_RestoreAndFleetPrintParsableLine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the leafline phases read /proc and /sys: Linux only")
	}
	var out, errb bytes.Buffer
	args := []string{"bench", "--only", "l,F", "--transport", "relay", "--insecure", "--unsigned",
		"--cuts", "2", "--cut-for", "300ms", "--restore-rate", "50",
		"--fleet-edges", "2", "--fleet-events", "50", "--fleet-cut", "1s", "--dir", t.TempDir()}
	if code := dispatch(context.Background(), args, &out, &errb); code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, errb.String(), out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	figs, err := bench.ParseLine(lines[len(lines)-1])
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := map[string]bool{}
	for _, f := range figs {
		got[f.Name] = true
	}
	for _, name := range []string{"restore_p50_ms", "restore_p99_ms", "restore_max_ms", "restore_stalls", "fleet_drain_s", "fleet_cpu_s_per_1k", "fleet_stalls", "fleet_parked_ratio"} {
		if !got[name] {
			t.Errorf("no %s in %q", name, lines[len(lines)-1])
		}
	}
	for _, row := range []string{"\nl ", "\nF ", "\nF_parked ", "\nF_again "} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no %q row:\n%s", strings.TrimSpace(row), out.String())
		}
	}
}

// TestBench_WirePrintsParsableLine runs `leafline bench --only wire` at a
// tiny size and checks that the line carries its four figures; the
// figures themselves are not checked.
func TestBench_WirePrintsParsableLine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the leafline phases read /proc and /sys: Linux only")
	}
	var out, errb bytes.Buffer
	args := []string{"bench", "--only", "wire", "--wire", "50", "--insecure", "--unsigned", "--dir", t.TempDir()}
	if code := dispatch(context.Background(), args, &out, &errb); code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, errb.String(), out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	figs, err := bench.ParseLine(lines[len(lines)-1])
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := map[string]float64{}
	for _, f := range figs {
		got[f.Name] = f.Value
	}
	for _, name := range []string{"wire_bytes_down_per_event", "wire_bytes_down_per_event_s2", "wire_bytes_up_per_receipt", "wire_bytes_up_per_receipt_s2"} {
		if got[name] <= 0 {
			t.Errorf("%s missing or zero in %q", name, lines[len(lines)-1])
		}
	}
}
