// Package completiontest runs and feeds L1's completion service in tests.
package completiontest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

// Expected mimics the topology: edge-1 takes every event, edge-2 only
// events.a.>, and events.none has no processor.
func Expected(subject string) []string {
	switch {
	case subject == "events.none":
		return nil
	case strings.HasPrefix(subject, "events.a."):
		return []string{"edge-2", "edge-1", "edge-1"} // unsorted, duplicated: ApplyOrigin normalizes
	}
	return []string{"edge-1"}
}

func CreateL1A(t testing.TB, js jetstream.JetStream, retention jetstream.RetentionPolicy) {
	t.Helper()
	_, err := js.CreateStream(jstest.Ctx(t), jetstream.StreamConfig{
		Name: "L1A", Subjects: []string{"events.>"}, Storage: jetstream.FileStorage, Retention: retention,
	})
	if err != nil {
		t.Fatalf("create L1A: %v", err)
	}
}

func TrackingConfig(js jetstream.JetStream) completion.ServiceConfig {
	cfg := Config(js)
	cfg.OriginStream = "L1A"
	cfg.Expected = Expected
	cfg.Sites = []string{"edge-1", "edge-2", "edge-3"}
	return cfg
}

// StartTracking runs a Service with origin tracking on fresh L1A and R1.
func StartTracking(t testing.TB, mod func(*completion.ServiceConfig)) (*completion.Service, jetstream.JetStream) {
	t.Helper()
	_, js := jstest.StartJS(t, jstest.Options{})
	CreateR1(t, js)
	CreateL1A(t, js, jetstream.LimitsPolicy)
	cfg := TrackingConfig(js)
	if mod != nil {
		mod(&cfg)
	}
	svc, err := completion.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Setup(jstest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	Run(t, svc)
	return svc, js
}

// PublishEvent publishes an origin event with its event_id in Nats-Msg-Id.
func PublishEvent(t testing.TB, js jetstream.JetStream, subject, id string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := js.PublishMsg(jstest.Ctx(t), m); err != nil {
		t.Fatalf("Publish event: %v", err)
	}
}

// SendReceipt publishes a receipt from processor p (site p).
func SendReceipt(t testing.TB, js jetstream.JetStream, id, p string, st receipt.Status) receipt.Receipt {
	t.Helper()
	r := receipt.New(id, "L1A", p, p, st, time.Now())
	if st == receipt.StatusDeadLettered {
		r.Reason = "sink: permanent"
	}
	if _, err := js.Publish(jstest.Ctx(t), "leafline.receipts."+p, receipttest.Encode(t, r), jetstream.WithMsgID(r.MsgID())); err != nil {
		t.Fatalf("Publish receipt: %v", err)
	}
	return r
}

// WaitStatus polls until eventID's record has status want.
func WaitStatus(t testing.TB, src record.StatusSource, id string, want record.EventStatus) record.Completion {
	t.Helper()
	var c record.Completion
	check.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		var err error
		if c, err = src.Get(jstest.Ctx(t), id); err != nil {
			return err
		}
		if c.Status != want {
			return fmt.Errorf("%q: status %s, want %s", id, c.Status, want)
		}
		return nil
	})
	return c
}

func ListAll(t testing.TB, src record.StatusSource, q record.ListQuery) []string {
	t.Helper()
	var ids []string
	for page := 0; ; page++ {
		items, next, err := src.List(jstest.Ctx(t), q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		for _, c := range items {
			ids = append(ids, c.EventID)
		}
		if next == "" {
			break
		}
		if page > 10_000 {
			t.Fatal("List does not end")
		}
		q.After = next
	}
	slices.Sort(ids)
	return ids
}

const ReceiptsSubject = "leafline.receipts.edge-1"

var QuietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func CreateR1(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	_, err := js.CreateStream(jstest.Ctx(t), jetstream.StreamConfig{
		Name: "R1", Subjects: []string{"leafline.receipts.>"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatalf("create R1: %v", err)
	}
}

func Config(js jetstream.JetStream) completion.ServiceConfig {
	return completion.ServiceConfig{JS: js, Stream: "R1", RetryDelay: 50 * time.Millisecond, Logger: QuietLog}
}

// Run runs svc until the test ends and checks that Run returned nil.
func Run(t testing.TB, svc *completion.Service) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

// Publish sends b to the receipts stream, with a Nats-Msg-Id when msgID != "".
func Publish(t testing.TB, js jetstream.JetStream, b []byte, msgID string) *jetstream.PubAck {
	t.Helper()
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	pa, err := js.Publish(jstest.Ctx(t), ReceiptsSubject, b, opts...)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return pa
}

func StatsEqual(s *completion.Service, want record.Stats) error {
	got := s.Stats()
	got.Retried, want.Retried = 0, 0
	if got != want {
		return fmt.Errorf("stats %+v, want %+v", got, want)
	}
	return nil
}

// ConsumerDrained reports an error until the consumer has nothing pending
// and nothing unacknowledged.
func ConsumerDrained(ctx context.Context, js jetstream.JetStream, stream, consumer string) error {
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
		return fmt.Errorf("consumer: ack pending %d, pending %d, redelivered %d", info.NumAckPending, info.NumPending, info.NumRedelivered)
	}
	return nil
}
