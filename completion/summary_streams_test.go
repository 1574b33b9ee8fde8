package completion_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
)

// unreadableJS answers every Stream call for one stream name with a
// transient error, as a JetStream that does not answer in time.
type unreadableJS struct {
	jetstream.JetStream
	name string
}

func (j unreadableJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if name == j.name {
		return nil, fmt.Errorf("stream info %s: %w", name, context.DeadlineExceeded)
	}
	return j.JetStream.Stream(ctx, name)
}

// TestSummary_StreamsFill: the summary of a Service on L1's completion
// state reports each configured stream that exists, in order, with its
// bytes, messages and limits; a stream that does not exist or cannot be
// read is left out and the summary still answers; what it read is reused
// for a moment rather than read on every call.
func TestSummary_StreamsFill(t *testing.T) {
	const maxBytes = 1 << 20
	dir := t.TempDir()
	svc, js := completiontest.StartTracking(t, func(c *completion.ServiceConfig) {
		c.ApplyBatch, c.BatchSize = state.ServiceApplyBatch, state.ServiceBatchSize
		js := c.JS
		c.OpenState = func(ctx context.Context) (record.State, error) {
			return state.Open(ctx, state.Config{JS: js, Path: filepath.Join(dir, "completion.db"), ImportBucket: "-",
				Sites: c.Sites, HoldUntilOrigin: true, Logger: completiontest.QuietLog})
		}
		c.JS = unreadableJS{JetStream: js, name: "UNREADABLE"}
		c.Streams = []string{"L1A", "NOSUCH", "UNREADABLE", "R1", state.DefaultLogStream, completion.DefaultQuarantineStream}
	})
	ctx := jstest.Ctx(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "UNREADABLE", Subjects: []string{"unreadable"}}); err != nil {
		t.Fatal(err)
	}
	l1a, err := js.Stream(ctx, "L1A")
	if err != nil {
		t.Fatal(err)
	}
	sc := l1a.CachedInfo().Config
	sc.MaxBytes = maxBytes
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	const events = 20
	for i := range events {
		m := nats.NewMsg(fmt.Sprintf("events.x.%d", i))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("ev-%d", i))
		m.Data = make([]byte, 4096)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	var fills []record.StreamFill
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		sum, err := svc.Summary(ctx)
		if err != nil {
			return err
		}
		fills = sum.Streams
		var names []string
		for _, f := range fills {
			names = append(names, f.Stream)
		}
		if got, want := strings.Join(names, ","), "L1A,R1,"+state.DefaultLogStream+","+completion.DefaultQuarantineStream; got != want {
			return fmt.Errorf("streams %s, want %s", got, want)
		}
		if fills[0].Msgs != events {
			return fmt.Errorf("L1A: %d messages, want %d", fills[0].Msgs, events)
		}
		return nil
	})
	info, err := l1a.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := fills[0]
	if got.Bytes != info.State.Bytes || got.Bytes < events*4096 || got.MaxBytes != maxBytes || got.MaxMsgs > 0 {
		t.Errorf("L1A: %+v, want %d bytes of %d", got, info.State.Bytes, maxBytes)
	}
	if want := float64(got.Bytes) / maxBytes; got.Fill != want || !got.Limited() || got.Filling() {
		t.Errorf("L1A fill %v (limited %v, filling %v), want %v", got.Fill, got.Limited(), got.Filling(), want)
	}
	if r1 := fills[1]; r1.Limited() || r1.Fill != 0 {
		t.Errorf("R1 has no limit: %+v", r1)
	}

	// Read at most every 2 s: a summary right after another shows the
	// same figures, then the new ones.
	before, err := svc.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read := time.Now()
	completiontest.PublishEvent(t, js, "events.x.more", "ev-more")
	again, err := svc.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(read) < time.Second && again.Streams[0] != before.Streams[0] {
		t.Errorf("L1A read again within a second: %+v, then %+v", before.Streams[0], again.Streams[0])
	}
	check.For(t, 10*time.Second, 100*time.Millisecond, func() error {
		sum, err := svc.Summary(ctx)
		if err != nil {
			return err
		}
		if n := sum.Streams[0].Msgs; n != events+1 {
			return fmt.Errorf("L1A: %d messages, want %d", n, events+1)
		}
		return nil
	})
}

// TestSummary_NoStreams: without ServiceConfig.Streams the summary has
// none, and its JSON no "streams" key.
func TestSummary_NoStreams(t *testing.T) {
	svc, _ := completiontest.StartTracking(t, nil)
	sum, err := svc.Summary(jstest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Streams != nil || strings.Contains(string(b), `"streams"`) {
		t.Errorf("streams %+v, want none: %s", sum.Streams, b)
	}
}
