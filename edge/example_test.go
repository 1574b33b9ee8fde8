package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/systest"

	"github.com/leafline/leafline/sink"
)

// journal is a sink of one's own: it appends each event to a file and
// fsyncs it before it answers, and skips an event_id it already holds.
type journal struct {
	mu   sync.Mutex
	f    *os.File
	seen map[string]bool
}

func (j *journal) Write(ctx context.Context, evs []sink.Event) []error {
	j.mu.Lock()
	defer j.mu.Unlock()
	errs := make([]error, len(evs))
	for i, ev := range evs {
		if j.seen[ev.ID] {
			continue // a redelivery: already done
		}
		line, err := json.Marshal(map[string]any{"event_id": ev.ID, "subject": ev.Subject, "data": ev.Data})
		if err != nil {
			errs[i] = sink.Permanent(err) // this event can never be written
			continue
		}
		if _, errs[i] = j.f.Write(append(line, '\n')); errs[i] == nil {
			j.seen[ev.ID] = true
		}
	}
	// Durable before Write returns: a receipt never speaks for lost work.
	if err := j.f.Sync(); err != nil {
		for i := range errs {
			errs[i] = err // temporary: the events come back
		}
	}
	return errs
}

// An edge box hands its events to a sink written in Go. systest.New runs
// L1, a hub and the edge in this process; in a program of one box,
// leafline.New(cfg, logger, edge.WithSink(j)) does the same.
func ExampleWithSink() {
	dir, _ := os.MkdirTemp("", "leafline-example-")
	defer os.RemoveAll(dir)
	f, _ := os.Create(filepath.Join(dir, "journal.jsonl"))
	defer f.Close()
	j := &journal{f: f, seen: map[string]bool{}}

	ls, err := systest.New(dir, systest.Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, func(site string) []edge.Option {
		if site == "edge1" {
			return []edge.Option{edge.WithSink(j)}
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ls.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ls.StartAll(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// Publish three events at L1, each with its event_id.
	nc, _ := nats.Connect(ls.App("l1").ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ids := []string{"order-1", "order-2", "order-3"}
	for _, id := range ids {
		m := nats.NewMsg("events.orders")
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Data = []byte(`{"qty":1}`)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			fmt.Println(err)
			return
		}
	}

	// L1 learns from each receipt that the work was done.
	store := leafline.Completions(ls.App("l1")).State()
	for _, id := range ids {
		for {
			c, err := store.Get(ctx, id)
			if err == nil && c.Processors["edge1"].Status == receipt.StatusProcessed {
				fmt.Println(id, "processed by edge1")
				break
			}
			select {
			case <-ctx.Done():
				fmt.Println(id, "not completed:", ctx.Err())
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	// Output:
	// order-1 processed by edge1
	// order-2 processed by edge1
	// order-3 processed by edge1
}
