package sink_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/topology"
)

// httpResetter is a target that resets the connection of every request
// whose body holds one of its poison event_ids (all of them when
// everything is set), and stores the events of the others.
type httpResetter struct {
	poison     []string
	everything atomic.Bool
	resets     atomic.Int64

	mu     sync.Mutex
	stored map[string]bool
	sent   map[string]int // requests that carried each poison event
}

func (h *httpResetter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	reset := h.everything.Load()
	h.mu.Lock()
	for _, id := range h.poison {
		if bytes.Contains(body, []byte(id)) {
			h.sent[id]++
			reset = true
		}
	}
	h.mu.Unlock()
	if reset {
		h.resets.Add(1)
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		c.(*net.TCPConn).SetLinger(0) // close with a RST
		c.Close()
		return
	}
	evs, err := httpDecodeBatch(r, body)
	if id := r.Header.Get(sink.HTTPHeaderEventID); id != "" {
		var ev sink.Event
		ev, err = sink.DecodeEvent(body)
		evs = []sink.Event{ev}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	for _, ev := range evs {
		h.stored[ev.ID] = true
	}
	h.mu.Unlock()
}

func (h *httpResetter) has(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stored[id]
}

func (h *httpResetter) sends(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent[id]
}

func startHTTPResetter(t *testing.T, mode string, poison ...string) (*httpResetter, sink.Sink, *crashCounts) {
	t.Helper()
	h := &httpResetter{poison: poison, stored: map[string]bool{}, sent: map[string]int{}}
	url, _ := httpScripted(t, h.ServeHTTP)
	var counts crashCounts
	o, err := sink.Open(topology.SinkConfig{Type: "http", HTTP: &topology.HTTPSinkConfig{
		URL: url + "/events", Mode: mode, Timeout: topology.Duration(5 * time.Second),
	}}, sink.Deps{Log: httpTestLogger(t), Count: counts.counters()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { o.Close() })
	return h, o.Sink, &counts
}

// A target that resets the connection on one event every time: the event
// is a poison event after three resets in a row, also when it is
// redelivered alone, and the events sent with it are done.
func TestHTTPSink_PoisonEvent(t *testing.T) {
	for _, mode := range []string{"batch", "single"} {
		t.Run(mode, func(t *testing.T) {
			evs := sinktest.Events(12)
			poison := evs[4]
			h, s, counts := startHTTPResetter(t, mode, poison.ID)
			httpCheckOutcome(t, "an event before", httpWriteAll(t, s, evs[:1])[0], httpOK)
			// A delivery of the poison event among others, then the
			// runner's redeliveries of it alone until its outcome is
			// permanent, then more events.
			res := map[string]error{}
			for i, err := range httpWriteAll(t, s, evs[1:8]) {
				res[evs[1+i].ID] = err
			}
			for range 6 {
				if res[poison.ID] = httpWriteAll(t, s, []sink.Event{poison})[0]; sink.IsPermanent(res[poison.ID]) {
					break
				}
			}
			for i, err := range httpWriteAll(t, s, evs[8:]) {
				res[evs[8+i].ID] = err
			}
			for _, ev := range evs[1:] {
				err := res[ev.ID]
				if ev.ID == poison.ID {
					if !errors.Is(err, sink.ErrWorkerCrash) || !sink.IsPermanent(err) {
						t.Errorf("poison event: want a permanent ErrWorkerCrash, got %v", err)
					}
					continue
				}
				httpCheckOutcome(t, "event "+ev.ID, err, httpOK)
				if !h.has(ev.ID) {
					t.Errorf("event %s answered ok but not stored", ev.ID)
				}
			}
			// A reset counts against the events in flight only once the
			// target has answered since the reset before; the events sent
			// with the poison event go concurrently, so whether its second
			// reset comes before or after their answers decides whether
			// one more send is needed to confirm its third: 3 or 4 resets.
			// In mode single, the client's transport also sends a request
			// with an Idempotency-Key again by itself when a reused
			// connection is reset: one reset, more sends.
			crashes := counts.crashes.Load()
			if crashes < 3 || crashes > 4 {
				t.Errorf("%d resets counted, want 3 or 4", crashes)
			}
			if n := h.sends(poison.ID); n < int(crashes) || mode == "batch" && n != int(crashes) {
				t.Errorf("the poison event was sent %d times, with %d resets counted", n, crashes)
			}
		})
	}
}

// A target that resets every connection is broken, not fed poison: its
// events fail temporarily however often they are sent.
func TestHTTPSink_ResetEverythingPoisonsNothing(t *testing.T) {
	for _, mode := range []string{"batch", "single"} {
		t.Run(mode, func(t *testing.T) {
			h, s, _ := startHTTPResetter(t, mode)
			evs := sinktest.Events(4)
			for i, err := range httpWriteAll(t, s, evs[:1]) {
				httpCheckOutcome(t, fmt.Sprintf("event %d before the target broke", i), err, httpOK)
			}
			h.everything.Store(true)
			for attempt := range 6 {
				for i, err := range httpWriteAll(t, s, evs[1:]) {
					httpCheckOutcome(t, fmt.Sprintf("attempt %d, event %d", attempt, i), err, httpTemporary)
				}
			}
			if n := h.resets.Load(); n < 6 {
				t.Errorf("%d resets, want at least 6", n)
			}
			h.everything.Store(false)
			for i, err := range httpWriteAll(t, s, evs[1:]) {
				httpCheckOutcome(t, fmt.Sprintf("event %d once the target works", i), err, httpOK)
			}
		})
	}
}
