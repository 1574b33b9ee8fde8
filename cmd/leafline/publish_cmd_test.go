package main

import (
	"context"
	"strings"
	"testing"
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
}
