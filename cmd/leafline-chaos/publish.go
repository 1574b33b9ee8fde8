//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/cmd/leafline-chaos/internal/check"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/faultlog"
)

// history is the publisher's log: each event published, then PubAck'ed or
// unknown. Event n has event_id "ev-<n>". Every transition is also written
// as a JSON line to <dir>/history.jsonl.
type history struct {
	mu      sync.Mutex
	states  []byte
	f       *os.File
	w       *bufio.Writer
	start   time.Time
	flushed time.Time

	published, acked, unknown atomic.Int64
}

func newHistory(path string) (*history, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &history{f: f, w: bufio.NewWriterSize(f, 1<<20), start: time.Now()}, nil
}

type historyLine struct {
	T     float64 `json:"t"`
	Event string  `json:"event_id"`
	Op    string  `json:"op"`
	Seq   uint64  `json:"seq,omitempty"`
	Err   string  `json:"err,omitempty"`
}

func (h *history) log(n int, op string, seq uint64, err error) {
	l := historyLine{T: time.Since(h.start).Seconds(), Event: check.EventID(n), Op: op, Seq: seq}
	if err != nil {
		l.Err = err.Error()
	}
	b, _ := json.Marshal(l)
	h.w.Write(append(b, '\n'))
	// At most a second of history is lost if the driver dies.
	if now := time.Now(); now.Sub(h.flushed) > time.Second {
		h.w.Flush()
		h.flushed = now
	}
}

// add registers event n as published and returns it.
func (h *history) add() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.states)
	h.states = append(h.states, check.Published)
	h.log(n, "publish", 0, nil)
	h.published.Add(1)
	return n
}

func (h *history) resolve(n int, st byte, seq uint64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.states[n] != check.Published {
		return
	}
	h.states[n] = st
	if st == check.Acked {
		h.acked.Add(1)
		h.log(n, "ok", seq, nil)
	} else {
		h.unknown.Add(1)
		h.log(n, "unknown", 0, err)
	}
}

// snapshot returns a copy of the states.
func (h *history) snapshot() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]byte(nil), h.states...)
}

func (h *history) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.w.Flush()
	h.f.Close()
}

// publisher publishes events at L1 at a steady rate over its own
// connection, with Nats-Msg-Id = event_id.
type publisher struct {
	h    *history
	url  string
	rate int
	rec  *faultlog.Log
	// unresolved futures, in publish order
	futs chan pubFuture
	done chan struct{}
}

type pubFuture struct {
	n int
	f jetstream.PubAckFuture
}

const pubAckTimeout = 5 * time.Second

// run publishes until ctx is done, then waits for the outstanding PubAcks
// (each bounded by pubAckTimeout) and returns.
func (p *publisher) run(ctx context.Context) error {
	nc, err := nats.Connect(p.url, nats.Name("chaos-publisher"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.RetryOnFailedConnect(true), nats.ReconnectBufSize(32<<20),
		nats.ErrorHandler(asyncErrors(p.rec, "publisher")))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(pubAckTimeout), jetstream.WithPublishAsyncMaxPending(4000))
	if err != nil {
		return err
	}
	p.futs = make(chan pubFuture, 1<<16)
	p.done = make(chan struct{})
	go p.resolve()

	start := time.Now()
	sent := 0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		due := int(time.Since(start).Seconds() * float64(p.rate))
		if due-sent > p.rate {
			// More than a second behind (L1 down, backpressure): do not
			// burst, rebase the schedule.
			start = time.Now().Add(-time.Duration(float64(sent) / float64(p.rate) * float64(time.Second)))
			due = sent + 1
		}
		for ; sent < due && ctx.Err() == nil; sent++ {
			n := p.h.add()
			id := check.EventID(n)
			m := nats.NewMsg(fmt.Sprintf("events.chaos.%d", n%8))
			m.Header.Set(jetstream.MsgIDHeader, id)
			m.Data = fmt.Appendf(nil, `{"event_id":%q,"n":%d}`, id, n)
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				p.h.resolve(n, check.Unknown, 0, err)
				continue
			}
			p.futs <- pubFuture{n, f}
		}
	}
	close(p.futs)
	select {
	case <-p.done:
	case <-time.After(2 * pubAckTimeout):
		// Every future has its own timeout; this is a backstop.
	}
	// Anything still unresolved is unknown.
	for n, st := range p.h.snapshot() {
		if st == check.Published {
			p.h.resolve(n, check.Unknown, 0, fmt.Errorf("no PubAck before the publisher stopped"))
		}
	}
	return nil
}

// asyncErrors logs a connection's asynchronous errors to the fault log
// (nats.go prints them to stderr otherwise).
func asyncErrors(rec *faultlog.Log, who string) nats.ErrHandler {
	return func(_ *nats.Conn, _ *nats.Subscription, err error) {
		rec.Debug("%s connection: %v", who, err)
	}
}

func (p *publisher) resolve() {
	defer close(p.done)
	for pf := range p.futs {
		select {
		case ack := <-pf.f.Ok():
			p.h.resolve(pf.n, check.Acked, ack.Sequence, nil)
		case err := <-pf.f.Err():
			p.h.resolve(pf.n, check.Unknown, 0, err)
		case <-time.After(pubAckTimeout + 5*time.Second):
			p.h.resolve(pf.n, check.Unknown, 0, fmt.Errorf("no PubAck and no error"))
		}
	}
}
