package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/check"
)

// TestPublishCommand publishes through `leafline publish` to a real L1A:
// --count events, one line each; the same --event-id again is reported as
// a duplicate and not stored twice.
func TestPublishCommand(t *testing.T) {
	env := startStatusEnv(t)
	code, out, errOut := runStatusCmd(cmdPublish, "--config", env.cfg, "--count", "5", "--batch", "2")
	if code != exitOK || strings.Count(out, "published event_id=") != 5 || strings.Contains(out, "duplicate=true") {
		t.Fatalf("publish --count 5: code %d\n%s\n%s", code, out, errOut)
	}
	for i, want := range []string{"duplicate=false", "duplicate=true"} {
		code, out, errOut = runStatusCmd(cmdPublish, "--config", env.cfg, "--event-id", "evt-cli-1")
		if code != exitOK || !strings.Contains(out, "event_id=evt-cli-1") || !strings.Contains(out, want) {
			t.Fatalf("publish #%d of evt-cli-1: code %d\n%s\n%s", i+1, code, out, errOut)
		}
	}
	st, err := env.js.Stream(context.Background(), "L1A")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background()); err != nil || info.State.Msgs != 6 {
		t.Fatalf("L1A holds %+v (%v), want 6 messages", info.State, err)
	}
	if code, _, errOut := runStatusCmd(cmdPublish, "--config", env.cfg, "--batch", "0"); code != exitUsage || !strings.Contains(errOut, "--batch must be") {
		t.Fatalf("--batch 0: code %d %s", code, errOut)
	}
	if code, _, errOut := runStatusCmd(cmdPublish, "--config", env.cfg, "--retry-for", "0s"); code != exitUsage || !strings.Contains(errOut, "--retry-for must be") {
		t.Fatalf("--retry-for 0s: code %d %s", code, errOut)
	}
}

// A publish that the full origin stream refuses says why, and names the
// sites that hold the most pending events there.
func TestPublishCommand_OriginFull(t *testing.T) {
	env := startStatusEnv(t)
	ctx := context.Background()
	st, err := env.js.Stream(ctx, "L1A")
	if err != nil {
		t.Fatal(err)
	}
	c := st.CachedInfo().Config
	c.MaxBytes, c.Discard = 4096, jetstream.DiscardNew
	if _, err := env.js.UpdateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runStatusCmd(cmdPublish, "--config", env.cfg, "--count", "200", "--batch", "1", "--retry-for", "1s"); code != exitFailure {
		t.Fatalf("200 events into 4 KiB: code %d %s", code, errOut)
	}
	// Once L1 has tracked what the stream holds, the refusal names who
	// holds it.
	check.For(t, 10*time.Second, 100*time.Millisecond, func() error {
		// It waits --retry-for for room, then says why there is none.
		code, out, errOut := runStatusCmd(cmdPublish, "--config", env.cfg, "--retry-for", "1s")
		if code != exitFailure || !strings.Contains(errOut, "the origin stream L1A is full") ||
			!strings.Contains(errOut, "pending events") || !strings.Contains(errOut, "edge1 holds") {
			return fmt.Errorf("publish into a full origin stream: code %d\n%s\n%s", code, out, errOut)
		}
		return nil
	})
}
