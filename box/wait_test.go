package box

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/topology"
)

// TestWait: a box waits through transient failures (no responders, JetStream
// unavailable), not ready with the reason meanwhile, and stops at once on
// an error that waiting cannot fix.
func TestWait(t *testing.T) {
	cfg, err := topology.LoadConfig(filepath.Join("..", "configs", "l1.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.Ops.Listen = t.TempDir(), "127.0.0.1:0"
	a, err := New(cfg, slog.New(slog.DiscardHandler), BaseRole{})
	if err != nil {
		t.Fatal(err)
	}
	unavailable := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	fails := []error{nats.ErrNoResponders, unavailable}
	calls, reasons := 0, []string{}
	err = a.Wait(context.Background(), "the streams", func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("an attempt without a deadline")
		}
		reasons = append(reasons, a.NotReadyReason())
		calls++
		if calls <= len(fails) {
			return fails[calls-1]
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Wait: %v after %d calls, want nil after 3", err, calls)
	}
	if !strings.HasPrefix(reasons[1], "waiting for the streams: nats: no responders") || !strings.Contains(reasons[2], "temporarily unavailable") {
		t.Fatalf("not-ready reasons while waiting: %q", reasons)
	}

	bad := &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}
	calls = 0
	err = a.Wait(context.Background(), "the streams", func(context.Context) error { calls++; return bad })
	if !errors.Is(err, bad) || calls != 1 {
		t.Fatalf("Wait on a conflict: %v after %d calls, want it at once", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = a.Wait(ctx, "the streams", func(context.Context) error { calls++; cancel(); return nats.ErrNoResponders })
	if !errors.Is(err, nats.ErrNoResponders) || calls != 1 {
		t.Fatalf("Wait after its context ended: %v after %d calls", err, calls)
	}
}
