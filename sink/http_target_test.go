package sink_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// httpTarget is an idempotent HTTP service: it keeps one record per
// event_id and counts the deliveries of each. It listens on a listener of
// its own, so that it can be taken down (connections refused) and brought
// back on the same address.
type httpTarget struct {
	t    *testing.T
	mode string
	srv  *http.Server
	addr string

	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]bool
	records  map[string]*httpRecord
	refusals map[string]*httpRefusal
	delay    time.Duration
	garble   string
}

type httpRecord struct {
	ev         sink.Event
	deliveries int
}

type httpRefusal struct {
	permanent bool
	times     int
}

func startHTTPTarget(t *testing.T, mode string) *httpTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &httpTarget{
		t:        t,
		mode:     mode,
		addr:     ln.Addr().String(),
		ln:       ln,
		conns:    map[net.Conn]bool{},
		records:  map[string]*httpRecord{},
		refusals: map[string]*httpRefusal{},
	}
	tg.srv = &http.Server{
		Handler:           tg,
		ReadHeaderTimeout: 10 * time.Second,
		ConnState:         tg.trackConn,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go tg.srv.Serve(ln)
	t.Cleanup(func() { tg.srv.Close() })
	return tg
}

func (tg *httpTarget) trackConn(c net.Conn, state http.ConnState) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	switch state {
	case http.StateNew:
		tg.conns[c] = true
	case http.StateClosed, http.StateHijacked:
		delete(tg.conns, c)
	}
}

func (tg *httpTarget) NewSink(t *testing.T) sink.Sink {
	return newHTTPSink(t, topology.HTTPSinkConfig{URL: "http://" + tg.addr, Mode: tg.mode})
}

func (tg *httpTarget) Stored(t *testing.T, id string) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.records[id] != nil {
		return 1
	}
	return 0
}

func (tg *httpTarget) deliveries(id string) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if r := tg.records[id]; r != nil {
		return r.deliveries
	}
	return 0
}

func (tg *httpTarget) Refuse(t *testing.T, id string, permanent bool, times int) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.refusals[id] = &httpRefusal{permanent: permanent, times: times}
}

func (tg *httpTarget) SetDelay(t *testing.T, d time.Duration) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.delay = d
}

func (tg *httpTarget) Garble(t *testing.T, how string) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.garble = how
}

// SetDown closes the listener and every connection (down), or listens on
// the same address again (up).
func (tg *httpTarget) SetDown(t *testing.T, down bool) {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if down {
		tg.ln.Close()
		for c := range tg.conns {
			c.Close()
		}
		return
	}
	ln, err := net.Listen("tcp", tg.addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", tg.addr, err)
	}
	tg.ln = ln
	go tg.srv.Serve(ln)
}

// deliver stores ev unless it is refused, and returns the target's result.
func (tg *httpTarget) deliver(ev sink.Event) sink.Result {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if rf := tg.refusals[ev.ID]; rf != nil {
		if rf.permanent {
			return sink.Result{EventID: ev.ID, Result: sink.ResultFail, Error: "invalid event"}
		}
		if rf.times > 0 {
			rf.times--
			return sink.Result{EventID: ev.ID, Result: sink.ResultRetry, Error: "busy"}
		}
	}
	r := tg.records[ev.ID]
	if r == nil {
		r = &httpRecord{ev: ev}
		tg.records[ev.ID] = r
	}
	r.deliveries++
	return sink.Result{EventID: ev.ID, Result: sink.ResultOK}
}

func (tg *httpTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := httpCheckRequest(r); err != nil {
		tg.t.Errorf("target: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	tg.mu.Lock()
	delay, garble := tg.delay, tg.garble
	tg.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return // the sink gave up: nothing is done
		}
	}

	var results []sink.Result
	if tg.mode == "single" {
		ev, err := sink.DecodeEvent(body)
		if err == nil && (r.Header.Get("Idempotency-Key") != ev.ID || r.Header.Get("Leafline-Event-Id") != ev.ID) {
			err = errors.New("Idempotency-Key or Leafline-Event-Id is not the event_id")
		}
		if err != nil {
			tg.t.Errorf("target: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		results = append(results, tg.deliver(ev))
	} else {
		evs, err := httpDecodeBatch(r, body)
		if err != nil {
			tg.t.Errorf("target: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, ev := range evs {
			results = append(results, tg.deliver(ev))
		}
	}

	switch garble {
	case "malformed":
		w.Write([]byte("<html>not JSON</html>"))
		return
	case "oversize":
		w.Write([]byte(`{"results":[`))
		w.Write(bytes.Repeat([]byte(" "), 5<<20))
		w.Write([]byte(`]}`))
		return
	}
	if tg.mode == "single" {
		switch res := results[0]; res.Result {
		case sink.ResultOK:
			w.WriteHeader(http.StatusNoContent)
		case sink.ResultFail:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			json.NewEncoder(w).Encode(map[string]string{"error": res.Error})
		default:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"results": results})
}

// httpCheckRequest checks what every request of the sink carries.
func httpCheckRequest(r *http.Request) error {
	switch {
	case r.Method != http.MethodPost:
		return fmt.Errorf("method %s, want POST", r.Method)
	case r.Header.Get("Content-Type") != "application/json":
		return fmt.Errorf("Content-Type %q", r.Header.Get("Content-Type"))
	case r.Header.Get("User-Agent") != "leafline":
		return fmt.Errorf("User-Agent %q", r.Header.Get("User-Agent"))
	}
	return nil
}

// httpDecodeBatch decodes a batch request's body and checks its
// Leafline-Batch-Size.
func httpDecodeBatch(r *http.Request, body []byte) ([]sink.Event, error) {
	var req struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("batch body: %w", err)
	}
	if got := r.Header.Get("Leafline-Batch-Size"); got != strconv.Itoa(len(req.Events)) {
		return nil, fmt.Errorf("Leafline-Batch-Size %q for %d events", got, len(req.Events))
	}
	evs := make([]sink.Event, len(req.Events))
	for i, raw := range req.Events {
		ev, err := sink.DecodeEvent(raw)
		if err != nil {
			return nil, err
		}
		evs[i] = ev
	}
	return evs, nil
}

// newHTTPSink returns an http sink with a 2s timeout (unless cfg sets
// one), logging to the test, closed when the test ends.
func newHTTPSink(t testing.TB, cfg topology.HTTPSinkConfig) *sink.HTTPSink {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = topology.Duration(2 * time.Second)
	}
	s, err := sink.NewHTTP(cfg, httpTestLogger(t))
	if err != nil {
		t.Fatalf("NewHTTP: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func httpTestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
