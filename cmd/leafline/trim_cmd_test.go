package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func runTrim(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := cmdTrim(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// On a stock server, `leafline trim` names a stream it cannot trim, and
// deletes nothing that the stream's taker has not taken.
func TestTrim_StockServer(t *testing.T) {
	_, hubCfg, _ := outboxFixture(t)
	url := stockServer(t, "hub").ClientURL()

	if code, _, errs := runTrim("--config", hubCfg, "--server", url, "--every", "-1s"); code != exitUsage || !strings.Contains(errs, "--every") {
		t.Fatalf("negative --every: code %d\n%s", code, errs)
	}
	if code, _, errs := runTrim("--config", hubCfg, "--server", url); code != exitFailure || !strings.Contains(errs, "stream HA") {
		t.Fatalf("trim before provision: code %d\n%s", code, errs)
	}
	if code, out, errs := runProvision("--config", hubCfg, "--server", url); code != exitOK {
		t.Fatalf("provision: code %d\n%s%s", code, out, errs)
	}

	// Five receipts reach RH; L1's source consumer has not taken them.
	js, s := editStream(t, url, "RH", func(c *jetstream.StreamConfig) { c.Subjects = []string{"test.rh"} })
	ctx := context.Background()
	for range 5 {
		if _, err := js.Publish(ctx, "test.rh", []byte("r")); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := runTrim("--config", hubCfg, "--server", url)
	if code != exitOK || !strings.Contains(out, "stream HA: 0 messages deleted") || !strings.Contains(out, "stream RH: 0 messages deleted") {
		t.Fatalf("trim: code %d\n%s%s", code, out, errs)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 5 {
		t.Fatalf("RH holds %d messages after trim (%v), want all 5", info.State.Msgs, err)
	}
}
