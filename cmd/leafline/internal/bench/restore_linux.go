//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/completion/record"
)

// stallWarning is what nats-server logs when a durable source's consumer
// waits for flow control replies that do not arrive.
const stallWarning = "stalled on flow control"

// stallCounter is a slog.Handler that counts the warnings of every box
// logging to it that contain stallWarning, and drops everything else.
type stallCounter struct{ n *atomic.Int64 }

func newStallLogger() (*slog.Logger, *atomic.Int64) {
	n := new(atomic.Int64)
	return slog.New(stallCounter{n}), n
}

func (h stallCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h stallCounter) Handle(_ context.Context, rec slog.Record) error {
	if strings.Contains(rec.Message, stallWarning) {
		h.n.Add(1)
	}
	return nil
}

func (h stallCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h stallCounter) WithGroup(string) slog.Handler      { return h }

// restoreRes is what l measured over one transport.
type restoreRes struct {
	transport string
	row       benchRow
	stalls    int64
	fromUp    []time.Duration // from the link being up again, not from the restore
}

// steady publishes one event every 1/rate at L1, each waiting for its
// PubAck, until stop; next is the index of the next event to publish.
type steady struct {
	next atomic.Int64
	stop chan struct{}
	done chan error
}

func (r *run) startSteady(js jetstream.JetStream, subj string, id func(int) string) *steady {
	s := &steady{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		t := time.NewTicker(time.Second / time.Duration(r.o.Rate))
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				s.done <- nil
				return
			case <-t.C:
			}
			i := int(s.next.Load())
			m := nats.NewMsg(subj)
			m.Header.Set(jetstream.MsgIDHeader, id(i))
			m.Data = r.payload
			ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
			_, err := js.PublishMsg(ctx, m)
			cancel()
			if err != nil {
				s.done <- fmt.Errorf("bench: steady publish of event %d: %w", i, err)
				return
			}
			s.next.Add(1)
		}
	}()
	return s
}

// halt stops the publisher and returns how many events it published.
func (s *steady) halt() (int, error) {
	close(s.stop)
	err := <-s.done
	return int(s.next.Load()), err
}

// linkRestore is l over one transport: l1, a hub and one edge, events
// flowing at Rate a second, the edge's link cut Cuts times.
func (r *run) linkRestore(transport string) {
	o := r.o
	r.m.Phase("l link restore [" + transport + "]")
	r.m.Track("start l1, a hub and an edge", "", 0, nil)
	log, stalls := newStallLogger()
	env := newBenchEnvLog(r.tb, r.TempDir(), 1, map[string]string{"edge1": "events.*.l.>"}, nil, transport, log)
	defer env.close()
	for _, c := range env.ls.Configs {
		c.JetStream.SyncInterval = "always"
	}
	env.startAll()
	env.waitUntil("links", time.Minute, func() bool { return env.connected("hub")() && env.connected("edge1")() })
	env.open("edge1")
	id := r.id("l")
	store := leafline.Completions(env.ls.App("l1")).State()
	base := env.applied()
	pub := r.startSteady(env.js["l1"], "events.x.l.0", id)
	var lat, fromUp []time.Duration
	var cuts atomic.Int64
	r.m.Track(fmt.Sprintf("cut for %s, restored", o.CutFor), "cuts", int64(o.Cuts), cuts.Load)
	ph := r.begin("l_restore")
	for range o.Cuts {
		env.ls.Links["edge1"].Cut()
		// The event being published as the link went down may have
		// crossed it already; the next one cannot have.
		first := int(pub.next.Load()) + 1
		r.sleep(o.CutFor)
		env.waitUntil("an event published during the cut", time.Minute, func() bool { return int(pub.next.Load()) > first })
		last := int(pub.next.Load()) - 1
		restored := time.Now()
		env.ls.Links["edge1"].Restore()
		up := r.linkUp(env, "edge1")
		at := r.firstRecorded(env, store, id, first, last)
		lat = append(lat, at.Sub(restored))
		fromUp = append(fromUp, max(0, at.Sub(up)))
		// Each cut starts from a system that has caught up.
		env.waitUntil("catch-up after a cut", 5*time.Minute, func() bool { return env.applied() >= base+uint64(last+1) })
		cuts.Add(1)
	}
	n, err := pub.halt()
	if err != nil {
		r.Fatal(err)
	}
	env.waitUntil("every event completed", 5*time.Minute, func() bool { return env.applied() >= base+uint64(n) })
	row := ph.end("l", "link restore -> first receipt of the cut at L1 ["+transport+"]", o.Cuts, lat,
		fmt.Sprintf("p50/p99 over cuts; max=%.0fms; from the link up again p50/p99 %.0f/%.0fms; %d stall warnings; %d events at %d/s all completed",
			float64(benchPct(lat, 1))/1e6, float64(benchPct(fromUp, 0.5))/1e6, float64(benchPct(fromUp, 0.99))/1e6, stalls.Load(), n, o.Rate))
	// Its events are cuts: CPU and flushes per cut mean nothing.
	row.cpu, row.flushes = 0, -1
	r.rows = append(r.rows, row)
	r.restore = append(r.restore, restoreRes{transport: transport, row: row, stalls: stalls.Load(), fromUp: fromUp})
}

// linkUp waits until site's upstream link is connected again and returns
// when it saw it (polled every 2 ms): a restored link comes up at the
// dialling site's next reconnect attempt, up to leafnode.reconnect_interval
// later, whichever the transport.
func (r *run) linkUp(env *benchEnv, site string) time.Time {
	up := env.connected(site)
	for deadline := time.Now().Add(time.Minute); !up(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			r.Fatalf("bench: %s's link not up again within a minute of its restore", site)
		}
	}
	return time.Now()
}

// firstRecorded waits until L1 has recorded the completion of event first
// and returns the earliest time L1 received the receipt of any event from
// first to last (at most 50 of them).
func (r *run) firstRecorded(env *benchEnv, store record.RecordReader, id func(int) string, first, last int) time.Time {
	get := func(i int) (time.Time, bool) {
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		defer cancel()
		c, err := store.Get(ctx, id(i))
		if errors.Is(err, record.ErrNotFound) {
			return time.Time{}, false
		}
		if err != nil {
			r.Fatalf("bench: completion of %s: %v", id(i), err)
		}
		p, ok := c.Processors["edge1"]
		return p.ReceivedAt, ok
	}
	env.waitUntil("the first receipt of the cut at L1", 2*time.Minute, func() bool { _, ok := get(first); return ok })
	at, _ := get(first)
	for i := first + 1; i <= min(last, first+50); i++ {
		if t, ok := get(i); ok && t.Before(at) {
			at = t
		}
	}
	return at
}

// restoreFigures are the figures of l per transport: plain names with
// one transport, suffixed with _<transport> with several.
func (r *run) restoreFigures() []Figure {
	var figs []Figure
	suffix := r.transportSuffix
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for _, x := range r.restore {
		s := suffix(x.transport)
		figs = append(figs, Figure{"restore_p50_ms" + s, ms(benchPct(x.row.lat, 0.5))},
			Figure{"restore_p99_ms" + s, ms(benchPct(x.row.lat, 0.99))},
			Figure{"restore_max_ms" + s, ms(benchPct(x.row.lat, 1))},
			Figure{"restore_from_up_p50_ms" + s, ms(benchPct(x.fromUp, 0.5))},
			Figure{"restore_from_up_p99_ms" + s, ms(benchPct(x.fromUp, 0.99))},
			Figure{"restore_stalls" + s, float64(x.stalls)})
	}
	return figs
}
