package completion_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
)

// redriveCopies returns the Leafline-Redrive values of the copies of id on
// L1A.
func redriveCopies(t *testing.T, js jetstream.JetStream, id string) (copies []string, total uint64) {
	t.Helper()
	ctx := jstest.Ctx(t)
	s, err := js.Stream(ctx, "L1A")
	if err != nil {
		t.Fatal(err)
	}
	last := s.CachedInfo().State.LastSeq
	for seq := uint64(1); seq <= last; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(jetstream.MsgIDHeader) == id && m.Header.Get(receipt.RedriveHeader) != "" {
			if m.Subject != "events.b" {
				t.Fatalf("copy of %q on %q", id, m.Subject)
			}
			copies = append(copies, m.Header.Get(receipt.RedriveHeader))
		}
	}
	return copies, last
}

// An event that an alive processor never reported is published again on
// the origin stream; one whose missing processor is not alive is not, and
// nothing is redriven once the event is complete.
func TestRedrive_OverdueEventPublishedAgain(t *testing.T) {
	svc, js := completiontest.StartTracking(t, func(c *completion.ServiceConfig) {
		c.OverdueAfter = 100 * time.Millisecond
		c.RedriveAfter = 400 * time.Millisecond
	})
	ctx := jstest.Ctx(t)
	// A copy must not fall in the origin stream's duplicate window.
	s, err := js.Stream(ctx, "L1A")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Duplicates = 100 * time.Millisecond
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	completiontest.PublishEvent(t, js, "events.b", "ok")
	completiontest.PublishEvent(t, js, "events.b", "lost")         // edge-1 never reports it
	completiontest.PublishEvent(t, js, "events.a.x", "edge2-down") // edge-2 never reports anything
	completiontest.WaitStatus(t, svc, "lost", record.EventPending)
	completiontest.SendReceipt(t, js, "edge2-down", "edge-1", receipt.StatusProcessed)

	// edge-1 is alive: its receipts for later events keep arriving.
	completiontest.SendReceipt(t, js, "ok", "edge-1", receipt.StatusProcessed)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				// A later event completes: the path has moved past "lost".
				id := fmt.Sprintf("later-%d", i)
				completiontest.PublishEvent(t, js, "events.b", id)
				completiontest.WaitStatus(t, svc, id, record.EventPending)
				completiontest.SendReceipt(t, js, id, "edge-1", receipt.StatusProcessed)
			}
		}
	}()
	defer func() { close(stop); <-done }()

	check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
		if c, _ := redriveCopies(t, js, "lost"); len(c) < 2 {
			return fmt.Errorf("copies of lost: %v", c)
		}
		return nil
	})
	// Not while "lost" was younger than RedriveAfter, and only because a
	// later event completed.
	if c, _ := redriveCopies(t, js, "lost"); c[0] != "1" || c[1] != "2" {
		t.Errorf("redrive numbers %v, want 1, 2", c)
	}
	for _, id := range []string{"ok", "edge2-down"} {
		if c, _ := redriveCopies(t, js, id); len(c) != 0 {
			t.Errorf("%s redriven %v", id, c)
		}
	}
	if svc.Stats().Redriven < 2 {
		t.Errorf("Stats().Redriven = %d", svc.Stats().Redriven)
	}

	completiontest.SendReceipt(t, js, "lost", "edge-1", receipt.StatusProcessed)
	completiontest.WaitStatus(t, svc, "lost", record.EventComplete)
	before, _ := redriveCopies(t, js, "lost")
	// A round as of an hour later would redrive anything still overdue.
	if n, err := svc.RedriveOnce(ctx, time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("a round after completion redrove %d events (err %v), want 0", n, err)
	}
	if after, _ := redriveCopies(t, js, "lost"); len(after) != len(before) {
		t.Errorf("a complete event was redriven: %v -> %v", before, after)
	}
}

func TestRedrive_Config(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	cfg := completiontest.Config(js)
	cfg.RedriveAfter = time.Minute // without OriginStream
	if _, err := completion.NewService(cfg); err == nil || !errors.Is(err, record.ErrInvalidConfig) {
		t.Fatalf("RedriveAfter without OriginStream: %v", err)
	}
}
