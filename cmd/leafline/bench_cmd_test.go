package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/leafline/leafline/internal/bench"
)

// TestBench_OnlyPrintsParsableLine runs `leafline bench --only z` (the
// disk's fsync ceiling, about four seconds) and checks that its last line
// is a bench line of name=value figures; the figures themselves depend
// on the machine and are not checked.
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
