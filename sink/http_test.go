package sink_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
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

// httpCheckFor calls fn every interval until it returns nil, and fails the
// test with fn's last error after timeout.
func httpCheckFor(t *testing.T, timeout, interval time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

func TestHTTPSink_Conformance(t *testing.T) {
	for _, mode := range []string{"batch", "single"} {
		t.Run(mode, func(t *testing.T) { sinktest.Run(t, startHTTPTarget(t, mode)) })
	}
}

// httpScripted starts a server that answers every request with h, and
// returns its URL and a count of its requests.
func httpScripted(t *testing.T, h http.HandlerFunc) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

type httpWant int

const (
	httpOK httpWant = iota
	httpPermanent
	httpTemporary
)

func (o httpWant) String() string {
	return [...]string{"success", "permanent failure", "temporary failure"}[o]
}

func httpCheckOutcome(t *testing.T, what string, err error, want httpWant) {
	t.Helper()
	var got httpWant
	switch {
	case err == nil:
		got = httpOK
	case sink.IsPermanent(err):
		got = httpPermanent
	default:
		got = httpTemporary
	}
	if got != want {
		t.Errorf("%s: want %v, got %v (%v)", what, want, got, err)
	}
}

func httpWriteAll(t *testing.T, s sink.Sink, evs []sink.Event) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := s.Write(ctx, evs)
	if len(errs) != len(evs) {
		t.Fatalf("Write returned %d results for %d events", len(errs), len(evs))
	}
	return errs
}

func TestHTTPSink_StatusMapping(t *testing.T) {
	redirect := "/elsewhere"
	cases := []struct {
		code   int
		header map[string]string
		body   string
		batch  httpWant // a batch of 3 events
		single httpWant
		// inErr must appear in a failure's text.
		inErr string
	}{
		{code: 200, batch: httpOK, single: httpOK},
		{code: 200, body: " \n", batch: httpOK, single: httpOK},
		{code: 201, batch: httpOK, single: httpOK},
		{code: 204, batch: httpOK, single: httpOK},
		{code: 200, body: "<html>ok</html>", batch: httpTemporary, single: httpTemporary, inErr: "malformed"},
		{code: 200, body: `["ok"]`, batch: httpTemporary, single: httpTemporary, inErr: "malformed"},
		{code: 400, body: `{"error":"no subject"}`, batch: httpPermanent, single: httpPermanent, inErr: "400 Bad Request: no subject"},
		{code: 404, batch: httpPermanent, single: httpPermanent, inErr: "404"},
		{code: 422, batch: httpPermanent, single: httpPermanent, inErr: "422"},
		{code: 413, batch: httpPermanent, single: httpPermanent, inErr: "413"},
		{code: 408, batch: httpTemporary, single: httpTemporary, inErr: "408"},
		{code: 429, batch: httpTemporary, single: httpTemporary, inErr: "429"},
		{code: 500, batch: httpTemporary, single: httpTemporary, inErr: "500"},
		{code: 502, batch: httpTemporary, single: httpTemporary, inErr: "502"},
		{code: 503, batch: httpTemporary, single: httpTemporary, inErr: "503"},
		{code: 504, batch: httpTemporary, single: httpTemporary, inErr: "504"},
		{code: 301, header: map[string]string{"Location": redirect}, batch: httpTemporary, single: httpTemporary, inErr: "301"},
		{code: 307, header: map[string]string{"Location": redirect}, batch: httpTemporary, single: httpTemporary, inErr: "307"},
		{code: 401, batch: httpTemporary, single: httpTemporary, inErr: "401"},
		{code: 403, batch: httpTemporary, single: httpTemporary, inErr: "403"},
		{code: 409, batch: httpTemporary, single: httpTemporary, inErr: "409"},
		{code: 418, batch: httpTemporary, single: httpTemporary, inErr: "418"},
	}
	for _, mode := range []string{"batch", "single"} {
		for _, tc := range cases {
			name := fmt.Sprintf("%s/%d", mode, tc.code)
			if tc.body != "" {
				name += "/body"
			}
			t.Run(name, func(t *testing.T) {
				var redirected atomic.Bool
				url, _ := httpScripted(t, func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == redirect {
						redirected.Store(true)
						return
					}
					io.Copy(io.Discard, r.Body)
					for k, v := range tc.header {
						w.Header().Set(k, v)
					}
					w.WriteHeader(tc.code)
					io.WriteString(w, tc.body)
				})
				s := newHTTPSink(t, topology.HTTPSinkConfig{URL: url, Mode: mode})
				want := tc.batch
				if mode == "single" {
					want = tc.single
				}
				evs := sinktest.Events(3)
				for i, err := range httpWriteAll(t, s, evs) {
					httpCheckOutcome(t, fmt.Sprintf("event %d", i), err, want)
					if err != nil && !strings.Contains(err.Error(), tc.inErr) {
						t.Errorf("event %d: error %q does not name %q", i, err, tc.inErr)
					}
				}
				if redirected.Load() {
					t.Error("the sink followed a redirect")
				}
			})
		}
	}
}

func TestHTTPSink_RetryAfter(t *testing.T) {
	cases := []struct {
		name, code, value string
		min, max          time.Duration
	}{
		{"seconds", "429", "7", 7 * time.Second, 7 * time.Second},
		{"date", "503", time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat), 28 * time.Second, 30 * time.Second},
		{"past date", "503", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0, 0},
		{"capped", "429", "99999999999", sink.HTTPMaxRetryAfter, sink.HTTPMaxRetryAfter},
		{"garbage", "500", "soon", 0, 0},
		{"none", "500", "", 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := httpScripted(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.value != "" {
					w.Header().Set("Retry-After", tc.value)
				}
				code, _ := strconv.Atoi(tc.code)
				w.WriteHeader(code)
			})
			s := newHTTPSink(t, topology.HTTPSinkConfig{URL: url})
			err := httpWriteAll(t, s, sinktest.Events(1))[0]
			httpCheckOutcome(t, "event", err, httpTemporary)
			if d := sink.RetryDelay(err); d < tc.min || d > tc.max {
				t.Errorf("RetryDelay = %v, want within [%v, %v] (%v)", d, tc.min, tc.max, err)
			}
		})
	}
}

func TestHTTPSink_BatchResults(t *testing.T) {
	evs := sinktest.Events(7)
	long := strings.Repeat("é", 600)
	url, _ := httpScripted(t, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"results": []sink.Result{
			{EventID: evs[0].ID, Result: "ok"},
			{EventID: evs[1].ID, Result: "fail", Error: "no such account"},
			{EventID: evs[2].ID, Result: "retry", Error: "locked"},
			{EventID: evs[3].ID, Result: "maybe"},
			// evs[4] has no result.
			{EventID: evs[5].ID, Result: "ok"},
			{EventID: evs[5].ID, Result: "fail"}, // disagrees with the one before
			{EventID: evs[6].ID, Result: "fail", Error: long},
			{EventID: "not-sent", Result: "ok"},
		}})
	})
	s := newHTTPSink(t, topology.HTTPSinkConfig{URL: url})
	errs := httpWriteAll(t, s, evs)
	httpCheckOutcome(t, "ok", errs[0], httpOK)
	httpCheckOutcome(t, "fail", errs[1], httpPermanent)
	httpCheckOutcome(t, "retry", errs[2], httpTemporary)
	httpCheckOutcome(t, "unknown result", errs[3], httpTemporary)
	httpCheckOutcome(t, "no result", errs[4], httpTemporary)
	httpCheckOutcome(t, "conflicting results", errs[5], httpTemporary)
	httpCheckOutcome(t, "long error", errs[6], httpPermanent)
	if errs[1] != nil && !strings.Contains(errs[1].Error(), "no such account") {
		t.Errorf("fail result: error %q lacks the target's reason", errs[1])
	}
	if !errors.Is(errs[3], sink.ErrMalformed) || !errors.Is(errs[5], sink.ErrMalformed) {
		t.Errorf("an unknown or conflicting result is not ErrMalformed: %v; %v", errs[3], errs[5])
	}
	if errs[6] != nil && len(errs[6].Error()) > 300 {
		t.Errorf("the target's error text is not cut: %d bytes", len(errs[6].Error()))
	}
}

func TestHTTPSink_SingleResults(t *testing.T) {
	cases := []struct {
		name, body string
		want       httpWant
		malformed  bool
	}{
		{"ok without id", `{"result":"ok"}`, httpOK, false},
		{"ok with id", `{"event_id":"$ID","result":"ok"}`, httpOK, false},
		{"fail", `{"event_id":"$ID","result":"fail","error":"bad"}`, httpPermanent, false},
		{"retry", `{"result":"retry"}`, httpTemporary, false},
		{"other id", `{"event_id":"someone-else","result":"ok"}`, httpTemporary, true},
		{"unknown result", `{"result":"done"}`, httpTemporary, true},
		{"null", `null`, httpTemporary, true},
		{"string", `"ok"`, httpTemporary, true},
		{"trailing", `{"result":"ok"} {}`, httpTemporary, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := httpScripted(t, func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, strings.ReplaceAll(tc.body, "$ID", r.Header.Get("Leafline-Event-Id")))
			})
			s := newHTTPSink(t, topology.HTTPSinkConfig{URL: url, Mode: "single"})
			err := httpWriteAll(t, s, sinktest.Events(1))[0]
			httpCheckOutcome(t, "event", err, tc.want)
			if tc.malformed && !errors.Is(err, sink.ErrMalformed) {
				t.Errorf("want ErrMalformed, got %v", err)
			}
		})
	}
}

func TestHTTPSink_TooLargeSplits(t *testing.T) {
	const limit = 1500 // bytes of body the target accepts
	tg := startHTTPTarget(t, "batch")
	var requests atomic.Int64
	front, _ := httpScripted(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		if len(body) > limit {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		tg.ServeHTTP(w, r)
	})
	s := newHTTPSink(t, topology.HTTPSinkConfig{URL: front})
	evs := sinktest.Events(16)
	big := 5
	evs[big].Data = fmt.Appendf(nil, `{"blob":%q}`, strings.Repeat("x", 2*limit))
	errs := httpWriteAll(t, s, evs)
	for i, err := range errs {
		want := httpOK
		if i == big {
			want = httpPermanent
		}
		httpCheckOutcome(t, fmt.Sprintf("event %d", i), err, want)
		if i != big && tg.deliveries(evs[i].ID) != 1 {
			t.Errorf("event %d delivered %d times, want 1", i, tg.deliveries(evs[i].ID))
		}
	}
	t.Logf("16 events, one too large, took %d requests", requests.Load())
}

func TestHTTPSink_DuplicateInBatch(t *testing.T) {
	for _, mode := range []string{"batch", "single"} {
		t.Run(mode, func(t *testing.T) {
			tg := startHTTPTarget(t, mode)
			s := tg.NewSink(t)
			evs := sinktest.Events(3)
			batch := []sink.Event{evs[0], evs[1], evs[0], evs[2], evs[0]}
			tg.Refuse(t, evs[1].ID, true, 0)
			errs := httpWriteAll(t, s, batch)
			for i, want := range []httpWant{httpOK, httpPermanent, httpOK, httpOK, httpOK} {
				httpCheckOutcome(t, fmt.Sprintf("position %d", i), errs[i], want)
			}
			if n := tg.deliveries(evs[0].ID); n != 1 {
				t.Errorf("a repeated event_id was delivered %d times, want once", n)
			}
		})
	}
}

func TestHTTPSink_Wire(t *testing.T) {
	for _, mode := range []string{"batch", "single"} {
		t.Run(mode, func(t *testing.T) {
			tg := startHTTPTarget(t, mode)
			s := tg.NewSink(t)
			evs := sinktest.Events(3)
			evs[1].Data = []byte{0xff, 0x00, 'n', 'o', 't', ' ', 'j', 's', 'o', 'n'}
			evs[2].Data = nil
			evs[2].OriginStream = ""
			for i, err := range httpWriteAll(t, s, evs) {
				httpCheckOutcome(t, fmt.Sprintf("event %d", i), err, httpOK)
			}
			for i, ev := range evs {
				tg.mu.Lock()
				got := tg.records[ev.ID].ev
				tg.mu.Unlock()
				if got.Subject != ev.Subject || got.OriginStream != ev.OriginStream || !bytes.Equal(got.Data, ev.Data) {
					t.Errorf("event %d: the target got %+v, want %+v", i, got, ev)
				}
			}
		})
	}
}

func TestHTTPSink_MaxConcurrency(t *testing.T) {
	const limit = 3
	for _, mode := range []string{"batch", "single"} {
		t.Run(mode, func(t *testing.T) {
			var inflight, most atomic.Int64
			full := make(chan struct{})
			var fullOnce sync.Once
			url, _ := httpScripted(t, func(w http.ResponseWriter, r *http.Request) {
				n := inflight.Add(1)
				defer inflight.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if n >= limit {
					fullOnce.Do(func() { close(full) })
				}
				// Hold every request until the sink has limit in flight,
				// so that one more would show.
				select {
				case <-full:
				case <-time.After(5 * time.Second):
				}
			})
			s := newHTTPSink(t, topology.HTTPSinkConfig{URL: url, Mode: mode, MaxConcurrency: limit, Timeout: topology.Duration(10 * time.Second)})
			var wg sync.WaitGroup
			for range 4 { // concurrent Writes share the bound
				wg.Go(func() {
					for i, err := range s.Write(context.Background(), sinktest.Events(5)) {
						httpCheckOutcome(t, fmt.Sprintf("event %d", i), err, httpOK)
					}
				})
			}
			wg.Wait()
			if got := most.Load(); got != limit {
				t.Errorf("at most %d requests were in flight, want exactly max_concurrency %d", got, limit)
			}
		})
	}
}

func TestHTTPSink_CancelInFlight(t *testing.T) {
	var arrived atomic.Int64
	url, _ := httpScripted(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that the server notices the client leave
		arrived.Add(1)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			arrived.Store(0)
			s := newHTTPSink(t, topology.HTTPSinkConfig{URL: url, Mode: "single", Timeout: topology.Duration(30 * time.Second)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			evs := sinktest.Events(3)
			done := make(chan []error, 1)
			go func() { done <- s.Write(ctx, evs) }()
			httpCheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
				if n := arrived.Load(); n < int64(len(evs)) {
					return fmt.Errorf("%d requests arrived", n)
				}
				return nil
			})
			start := time.Now()
			want := error(context.Canceled)
			if how == "cancel" {
				cancel()
			} else {
				want = net.ErrClosed
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case errs := <-done:
				for i, err := range errs {
					httpCheckOutcome(t, fmt.Sprintf("event %d", i), err, httpTemporary)
					if !errors.Is(err, want) {
						t.Errorf("event %d: want an error wrapping %v, got %v", i, want, err)
					}
				}
				t.Logf("Write returned %v after %s", time.Since(start), how)
			case <-time.After(5 * time.Second):
				t.Fatalf("Write did not return within 5s of %s", how)
			}
		})
	}
}

func TestHTTPSink_Close(t *testing.T) {
	url, n := httpScripted(t, func(http.ResponseWriter, *http.Request) {})
	s, err := sink.NewHTTP(topology.HTTPSinkConfig{URL: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	err = httpWriteAll(t, s, sinktest.Events(1))[0]
	httpCheckOutcome(t, "Write after Close", err, httpTemporary)
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: want net.ErrClosed, got %v", err)
	}
	if n.Load() != 0 {
		t.Errorf("a closed sink sent %d requests", n.Load())
	}
}

// httpTestPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files.
type httpTestPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	server                    tls.Certificate
}

func newHTTPTestPKI(t *testing.T) httpTestPKI {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "leafline test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	ca, err := x509.ParseCertificate(caDER)
	must(err)
	issue := func(serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: "leafline test " + strconv.FormatInt(serial, 10)},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		must(err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		must(err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	}
	p := httpTestPKI{
		caFile:   filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "client.pem"),
		keyFile:  filepath.Join(dir, "client-key.pem"),
		pool:     x509.NewCertPool(),
	}
	p.pool.AddCert(ca)
	must(os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	clientCert, clientKey := issue(2, x509.ExtKeyUsageClientAuth)
	must(os.WriteFile(p.certFile, clientCert, 0o600))
	must(os.WriteFile(p.keyFile, clientKey, 0o600))
	p.server, err = tls.X509KeyPair(issue(3, x509.ExtKeyUsageServerAuth))
	must(err)
	return p
}

func TestHTTPSink_TLS(t *testing.T) {
	pki := newHTTPTestPKI(t)
	var clientCN atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clientCN.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pki.pool,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	cases := []struct {
		name string
		cfg  topology.HTTPSinkConfig
		want httpWant
	}{
		{"ca and client cert", topology.HTTPSinkConfig{CAFile: pki.caFile, CertFile: pki.certFile, KeyFile: pki.keyFile}, httpOK},
		{"no client cert", topology.HTTPSinkConfig{CAFile: pki.caFile}, httpTemporary},
		{"system roots", topology.HTTPSinkConfig{CertFile: pki.certFile, KeyFile: pki.keyFile}, httpTemporary},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL = srv.URL
			s := newHTTPSink(t, tc.cfg)
			err := httpWriteAll(t, s, sinktest.Events(1))[0]
			httpCheckOutcome(t, "event", err, tc.want)
			if err != nil && !errors.Is(err, sink.ErrUnavailable) {
				t.Errorf("a TLS failure is not ErrUnavailable: %v", err)
			}
			t.Logf("outcome: %v", err)
		})
	}
	if cn, _ := clientCN.Load().(string); cn != "leafline test 2" {
		t.Errorf("the server saw client certificate %q", cn)
	}

	bad := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		cfg    topology.HTTPSinkConfig
		inErrs []string
	}{
		{"ca not PEM", topology.HTTPSinkConfig{CAFile: bad}, []string{"sink.http.ca_file:", "no PEM certificate"}},
		{"ca missing", topology.HTTPSinkConfig{CAFile: bad + ".missing"}, []string{"sink.http.ca_file:", "no such file"}},
		{"cert missing", topology.HTTPSinkConfig{CertFile: bad + ".missing", KeyFile: pki.keyFile}, []string{"sink.http.cert_file:"}},
		{"key alone", topology.HTTPSinkConfig{KeyFile: pki.keyFile}, []string{"sink.http.cert_file:", "go together"}},
		{"key mismatch", topology.HTTPSinkConfig{CertFile: pki.certFile, KeyFile: bad}, []string{"sink.http.cert_file:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL = srv.URL
			_, err := sink.NewHTTP(tc.cfg, nil)
			if err == nil {
				t.Fatal("NewHTTP succeeded")
			}
			for _, s := range tc.inErrs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestHTTPSink_Headers(t *testing.T) {
	got := make(chan http.Header, 1)
	url, _ := httpScripted(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Clone():
		default:
		}
	})
	file := filepath.Join(t.TempDir(), "headers")
	content := "# credentials for the target\nX-Api-Key: key-from-file-s3cret\n\n  # indented comment\r\nX-Tenant:   edge 7  \r\n"
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LEAFLINE_TEST_HTTP_TOKEN", "Bearer tok-from-env-s3cret")
	var logs bytes.Buffer
	s, err := sink.NewHTTP(topology.HTTPSinkConfig{
		URL:         url,
		HeadersFile: file,
		HeadersEnv:  map[string]string{"authorization": "LEAFLINE_TEST_HTTP_TOKEN"},
	}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := httpWriteAll(t, s, sinktest.Events(2))[0]; err != nil {
		t.Fatal(err)
	}
	h := <-got
	for name, want := range map[string]string{
		"X-Api-Key":     "key-from-file-s3cret",
		"X-Tenant":      "edge 7",
		"Authorization": "Bearer tok-from-env-s3cret",
		"User-Agent":    "leafline",
	} {
		if h.Get(name) != want {
			t.Errorf("header %s = %q, want %q", name, h.Get(name), want)
		}
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Errorf("a header value was logged:\n%s", logs.String())
	}
}

func TestHTTPSink_HeaderErrors(t *testing.T) {
	cases := []struct {
		name    string
		file    string            // headers_file's content; "" means none
		env     map[string]string // headers_env
		setenv  map[string]string
		inErr   []string
		noEcho  string
		okNoErr bool
	}{
		{name: "bare line", file: "X-Ok: 1\nbare-s3cret\n", inErr: []string{"sink.http.headers_file:", "line 2", `not a "Name: value" line`}, noEcho: "s3cret"},
		{name: "bad name", file: "# c\nBad Name s3cret: v\n", inErr: []string{"line 2", "not a valid header name"}, noEcho: "s3cret"},
		{name: "control character", file: "X-Key: ab\x01s3cret\n", inErr: []string{"line 1", "X-Key", "not allowed"}, noEcho: "s3cret"},
		{name: "empty value", file: "X-Key:\n", inErr: []string{"line 1", "empty value"}},
		{name: "reserved", file: "content-type: text/plain\nLeafline-Batch-Size: 3\n", inErr: []string{"line 1", "line 2", "Content-Type is set by the sink", "Leafline-Batch-Size is set by the sink"}},
		{name: "twice", file: "X-Key: a\nx-key: b\n", inErr: []string{"line 2", "already set by"}},
		{name: "file and env", file: "Authorization: a\n", env: map[string]string{"Authorization": "LEAFLINE_TEST_HDR"}, setenv: map[string]string{"LEAFLINE_TEST_HDR": "s3cret"}, inErr: []string{"sink.http.headers_env.Authorization", "already set by"}, noEcho: "s3cret"},
		{name: "env unset", env: map[string]string{"Authorization": "LEAFLINE_TEST_UNSET_VAR"}, inErr: []string{"sink.http.headers_env.Authorization", "LEAFLINE_TEST_UNSET_VAR is unset"}},
		{name: "env bad name", env: map[string]string{"X Key": "LEAFLINE_TEST_HDR"}, setenv: map[string]string{"LEAFLINE_TEST_HDR": "v"}, inErr: []string{`sink.http.headers_env["X Key"]`, "not a valid header name"}},
		{name: "comments and blanks only", file: "# nothing\n\n   \n", okNoErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.setenv {
				t.Setenv(k, v)
			}
			cfg := topology.HTTPSinkConfig{URL: "http://127.0.0.1:1", HeadersEnv: tc.env}
			if tc.file != "" {
				cfg.HeadersFile = filepath.Join(t.TempDir(), "headers")
				if err := os.WriteFile(cfg.HeadersFile, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s, err := sink.NewHTTP(cfg, nil)
			if tc.okNoErr {
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				return
			}
			if err == nil {
				t.Fatal("NewHTTP succeeded")
			}
			for _, want := range tc.inErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if tc.noEcho != "" && strings.Contains(err.Error(), tc.noEcho) {
				t.Errorf("error %q echoes the header's content", err)
			}
		})
	}
	_, err := sink.NewHTTP(topology.HTTPSinkConfig{URL: "http://127.0.0.1:1", HeadersFile: "/nonexistent/headers"}, nil)
	if err == nil || !strings.Contains(err.Error(), "sink.http.headers_file:") {
		t.Errorf("a missing headers_file: got %v", err)
	}
}

func TestHTTPSink_Config(t *testing.T) {
	// A target that is down does not stop the sink from being built.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	s := newHTTPSink(t, topology.HTTPSinkConfig{URL: down})
	err = httpWriteAll(t, s, sinktest.Events(1))[0]
	httpCheckOutcome(t, "event to a closed port", err, httpTemporary)
	if !errors.Is(err, sink.ErrUnavailable) {
		t.Errorf("a refused connection is not ErrUnavailable: %v", err)
	}

	_, err = sink.NewHTTP(topology.HTTPSinkConfig{URL: "ftp://x", Mode: "bulk", MaxConcurrency: -1, Timeout: -1}, nil)
	for _, want := range []string{"sink.http.url:", "sink.http.mode:", "sink.http.max_concurrency:", "sink.http.timeout:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a bad config: error %v does not name %s", err, want)
		}
	}
}

func BenchmarkHTTP(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	b.Cleanup(srv.Close)
	s, err := sink.NewHTTP(topology.HTTPSinkConfig{URL: srv.URL}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	evs := sinktest.Events(256)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for _, err := range s.Write(ctx, evs) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
}
