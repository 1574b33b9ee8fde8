package sink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/topology"
)

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
			check.For(t, 5*time.Second, 5*time.Millisecond, func() error {
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
