package sink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/topology"
)

// natsTestTimeout is the sinks' per-request timeout in these tests.
const natsTestTimeout = 2 * time.Second

// natsOversize is a reply body larger than the sink reads; the test server's
// max_payload is raised so that a service can send it.
const natsOversize = 2 << 20

func TestNATSSink_Conformance(t *testing.T) {
	sinktest.Run(t, newNATSTarget(t))
}

func TestNewNATS_Validation(t *testing.T) {
	srv := startNATSServer(t)
	nc := connectNATS(t, srv)
	for _, tc := range []struct {
		name string
		nc   *nats.Conn
		cfg  topology.NATSSinkConfig
		want string
	}{
		{"no connection", nil, topology.NATSSinkConfig{Subject: "svc.a"}, "sink.nats: no NATS connection"},
		{"no subject", nc, topology.NATSSinkConfig{}, "sink.nats.subject: required"},
		{"wildcard", nc, topology.NATSSinkConfig{Subject: "svc.*"}, "sink.nats.subject:"},
		{"full wildcard", nc, topology.NATSSinkConfig{Subject: "svc.>"}, "sink.nats.subject:"},
		{"empty token", nc, topology.NATSSinkConfig{Subject: "svc..a"}, "sink.nats.subject:"},
		{"space", nc, topology.NATSSinkConfig{Subject: "svc a"}, "sink.nats.subject:"},
		{"negative timeout", nc, topology.NATSSinkConfig{Subject: "svc.a", Timeout: -1}, "sink.nats.timeout:"},
		{"negative concurrency", nc, topology.NATSSinkConfig{Subject: "svc.a", MaxConcurrency: -1}, "sink.nats.max_concurrency:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sink.NewNATS(tc.nc, tc.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestNATSSink_NoService: construction succeeds with nobody listening, and
// a Write then fails temporarily at once (no responders), not after the
// timeout.
func TestNATSSink_NoService(t *testing.T) {
	srv := startNATSServer(t)
	nc := connectNATS(t, srv)
	s, err := sink.NewNATS(nc, topology.NATSSinkConfig{Subject: "svc.nobody", Timeout: topology.Duration(30 * time.Second)}, natsTestLogger(t))
	if err != nil {
		t.Fatalf("NewNATS with no service listening: %v", err)
	}
	defer s.Close()
	start := time.Now()
	evs := sinktest.Events(3)
	for i, err := range s.Write(context.Background(), evs) {
		if !errors.Is(err, sink.ErrUnavailable) || !errors.Is(err, nats.ErrNoResponders) || sink.IsPermanent(err) {
			t.Errorf("event %d: want a temporary no-responders ErrUnavailable, got %v", i, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("no responders took %v: the sink waited for its timeout", d)
	}
}

// natsCase is one reply the mapping table's service sends.
type natsCase struct {
	name    string
	respond func(req micro.Request, id string)
	want    string // "ok", "permanent" or "temporary"
	wantIs  error  // when set, the error must match it
	wantMsg string // when set, the error text must contain it
}

func natsHeaders(kv ...string) micro.RespondOpt {
	h := micro.Headers{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return micro.WithHeaders(h)
}

func natsBody(s string) func(micro.Request, string) {
	return func(req micro.Request, _ string) { req.Respond([]byte(s)) }
}

func natsMicroError(code string) func(micro.Request, string) {
	return func(req micro.Request, _ string) { req.Error(code, "order "+code, nil) }
}

func TestNATSSink_ReplyMapping(t *testing.T) {
	cases := []natsCase{
		{name: "empty body", want: "ok",
			respond: func(req micro.Request, _ string) { req.Respond(nil) }},
		{name: "header ok wins over the body", want: "ok",
			respond: func(req micro.Request, _ string) {
				req.Respond([]byte("not json"), natsHeaders("Leafline-Result", "ok"))
			}},
		{name: "header fail", want: "permanent", wantMsg: "amount must be positive",
			respond: func(req micro.Request, _ string) {
				req.Respond(nil, natsHeaders("Leafline-Result", "fail", "Leafline-Error", "amount must be positive"))
			}},
		{name: "header fail without a reason", want: "permanent",
			respond: func(req micro.Request, _ string) { req.Respond(nil, natsHeaders("Leafline-Result", "fail")) }},
		{name: "header retry", want: "temporary", wantMsg: "ledger locked",
			respond: func(req micro.Request, _ string) {
				req.Respond(nil, natsHeaders("Leafline-Result", "retry", "Leafline-Error", "ledger locked"))
			}},
		{name: "header name in lower case", want: "permanent",
			respond: func(req micro.Request, _ string) { req.Respond(nil, natsHeaders("leafline-result", "fail")) }},
		{name: "header unknown value", want: "temporary", wantIs: sink.ErrMalformed,
			respond: func(req micro.Request, _ string) { req.Respond(nil, natsHeaders("Leafline-Result", "done")) }},
		{name: "header ok wins over a micro error", want: "ok",
			respond: func(req micro.Request, _ string) { req.Error("503", "busy", nil, natsHeaders("Leafline-Result", "ok")) }},
		{name: "micro 400", want: "permanent", wantMsg: "order 400", respond: natsMicroError("400")},
		{name: "micro 404", want: "permanent", respond: natsMicroError("404")},
		{name: "micro 413", want: "permanent", respond: natsMicroError("413")},
		{name: "micro 422", want: "permanent", wantMsg: "order 422", respond: natsMicroError("422")},
		{name: "micro 500", want: "temporary", respond: natsMicroError("500")},
		{name: "micro 503", want: "temporary", wantMsg: "order 503", respond: natsMicroError("503")},
		{name: "micro error without a code", want: "temporary",
			respond: func(req micro.Request, _ string) { req.Respond(nil, natsHeaders("Nats-Service-Error", "boom")) }},
		{name: "json ok", want: "ok",
			respond: func(req micro.Request, id string) { req.RespondJSON(sink.Result{EventID: id, Result: "ok"}) }},
		{name: "json ok without event_id", want: "ok", respond: natsBody(`{"result":"ok"}`)},
		{name: "json fail", want: "permanent", wantMsg: "duplicate order number",
			respond: func(req micro.Request, id string) {
				req.RespondJSON(sink.Result{EventID: id, Result: "fail", Error: "duplicate order number"})
			}},
		{name: "json retry", want: "temporary", respond: natsBody(`{"result":"retry","error":"later"}`)},
		{name: "json for another event", want: "temporary", wantIs: sink.ErrMalformed,
			respond: natsBody(`{"event_id":"someone-else","result":"ok"}`)},
		{name: "json unknown result", want: "temporary", wantIs: sink.ErrMalformed, respond: natsBody(`{"result":"done"}`)},
		{name: "jetstream puback", want: "temporary", wantIs: sink.ErrMalformed, respond: natsBody(`{"stream":"ORDERS","seq":7}`)},
		{name: "json null", want: "temporary", wantIs: sink.ErrMalformed, respond: natsBody(`null`)},
		{name: "json array", want: "temporary", wantIs: sink.ErrMalformed, respond: natsBody(`[]`)},
		{name: "not json", want: "temporary", wantIs: sink.ErrMalformed, respond: natsBody("not json")},
		{name: "oversize ok", want: "temporary", wantIs: sink.ErrMalformed, wantMsg: "oversize",
			respond: func(req micro.Request, _ string) {
				req.Respond(bytes.Repeat([]byte(" "), sink.NATSMaxReply+1), natsHeaders("Leafline-Result", "ok"))
			}},
		{name: "1 MiB body is read", want: "ok",
			respond: func(req micro.Request, id string) {
				body, _ := json.Marshal(sink.Result{EventID: id, Result: "ok"})
				req.Respond(append(body, bytes.Repeat([]byte(" "), sink.NATSMaxReply-len(body))...))
			}},
	}

	srv := startNATSServer(t)
	var mu sync.Mutex
	byID := map[string]func(micro.Request, string){}
	svcNC := connectNATS(t, srv)
	svc, err := micro.AddService(svcNC, micro.Config{
		Name:    "mapping",
		Version: "1.0.0",
		Endpoint: &micro.EndpointConfig{
			Subject: "svc.mapping",
			Handler: micro.HandlerFunc(func(req micro.Request) {
				id := req.Headers().Get(sink.NATSHeaderEventID)
				mu.Lock()
				respond := byID[id]
				mu.Unlock()
				if respond == nil {
					req.Error("400", "unknown case", nil)
					return
				}
				respond(req, id)
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	if err := svcNC.Flush(); err != nil { // the server has the subscription
		t.Fatal(err)
	}
	s := newNATSSink(t, connectNATS(t, srv), "svc.mapping", 0)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs := sinktest.Events(1)
			mu.Lock()
			byID[evs[0].ID] = tc.respond
			mu.Unlock()
			err := s.Write(context.Background(), evs)[0]
			switch tc.want {
			case "ok":
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				return
			case "permanent":
				if !sink.IsPermanent(err) {
					t.Fatalf("want a permanent failure, got %v", err)
				}
			case "temporary":
				if err == nil || sink.IsPermanent(err) {
					t.Fatalf("want a temporary failure, got %v", err)
				}
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v is not %v", err, tc.wantIs)
			}
			if tc.wantMsg != "" && !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tc.wantMsg)
			}
		})
	}
}

// TestNATSSink_PlainResponder: any NATS client is a target. A bare
// subscriber sees the payload unchanged and the Leafline headers (and no
// Nats-Msg-Id), and an empty reply acknowledges the event.
func TestNATSSink_PlainResponder(t *testing.T) {
	srv := startNATSServer(t)
	type seen struct {
		header nats.Header
		data   []byte
	}
	got := make(chan seen, 10)
	respNC := connectNATS(t, srv)
	if _, err := respNC.Subscribe("svc.plain", func(m *nats.Msg) {
		got <- seen{m.Header, bytes.Clone(m.Data)}
		m.Respond(nil)
	}); err != nil {
		t.Fatal(err)
	}
	if err := respNC.Flush(); err != nil {
		t.Fatal(err)
	}
	s := newNATSSink(t, connectNATS(t, srv), "svc.plain", 0)

	evs := sinktest.Events(3)
	evs[1].Data = []byte{0x00, 0xff, 0xfe, '\n', '"'} // not JSON, not UTF-8
	evs[2].Data = nil
	evs[2].OriginStream = ""
	for i, err := range s.Write(context.Background(), evs) {
		if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	byID := map[string]seen{}
	for range evs {
		select {
		case m := <-got:
			byID[m.header.Get(sink.NATSHeaderEventID)] = m
		case <-time.After(5 * time.Second):
			t.Fatal("the responder did not see every request")
		}
	}
	for _, ev := range evs {
		m, ok := byID[ev.ID]
		if !ok {
			t.Errorf("event %s: no request with its Leafline-Event-Id", ev.ID)
			continue
		}
		if !bytes.Equal(m.data, ev.Data) {
			t.Errorf("event %s: body %q, want the payload %q unchanged", ev.ID, m.data, ev.Data)
		}
		for name, want := range map[string]string{
			sink.NATSHeaderSubject:      ev.Subject,
			sink.NATSHeaderOriginStream: ev.OriginStream,
		} {
			if v := m.header.Get(name); v != want {
				t.Errorf("event %s: header %s = %q, want %q", ev.ID, name, v, want)
			}
		}
		if v := m.header.Get(nats.MsgIdHdr); v != "" {
			t.Errorf("event %s: Nats-Msg-Id %q is set; it would meet a stream's dedupe", ev.ID, v)
		}
	}
}

// TestNATSSink_DuplicateInBatch: an event_id twice in one batch is sent
// once, and both positions get its result.
func TestNATSSink_DuplicateInBatch(t *testing.T) {
	tg := newNATSTarget(t)
	s := tg.NewSink(t).(*sink.NATSSink)
	defer s.Close()
	evs := sinktest.Events(3)
	tg.Refuse(t, evs[1].ID, true, 0)
	batch := []sink.Event{evs[0], evs[1], evs[0], evs[2], evs[1]}
	errs := s.Write(context.Background(), batch)
	for i, err := range errs {
		refused := batch[i].ID == evs[1].ID
		if refused != sink.IsPermanent(err) || (!refused && err != nil) {
			t.Errorf("position %d (%s): refused=%v, got %v", i, batch[i].ID, refused, err)
		}
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for _, ev := range evs {
		if n := tg.requests[ev.ID]; n != 1 {
			t.Errorf("event %s: the service got %d requests, want 1", ev.ID, n)
		}
	}
}

// TestNATSSink_MaxConcurrency: no more than MaxConcurrency requests are in
// flight at once.
func TestNATSSink_MaxConcurrency(t *testing.T) {
	tg := newNATSTarget(t)
	tg.SetDelay(t, 100*time.Millisecond)
	s := newNATSSink(t, tg.nc, tg.subject, 3)
	evs := sinktest.Events(12)
	for i, err := range s.Write(context.Background(), evs) {
		if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.maxInflight != 3 {
		t.Errorf("the service saw %d requests at once, want 3 (MaxConcurrency)", tg.maxInflight)
	}
}

// TestNATSSink_CtxDoneWhileWaiting: Write returns once ctx is done, well
// before the request timeout, with temporary failures.
func TestNATSSink_CtxDoneWhileWaiting(t *testing.T) {
	tg := newNATSTarget(t)
	tg.SetDelay(t, time.Minute)
	s, err := sink.NewNATS(tg.nc, topology.NATSSinkConfig{Subject: tg.subject, Timeout: topology.Duration(time.Minute), MaxConcurrency: 2}, natsTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := s.Write(ctx, sinktest.Events(5)) // 2 sent, 3 waiting for a slot
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Write returned %v after ctx was done", d)
	}
	for i, err := range errs {
		if !errors.Is(err, sink.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || sink.IsPermanent(err) {
			t.Errorf("event %d: want a temporary ErrUnavailable wrapping the ctx's error, got %v", i, err)
		}
	}
}

// TestNATSSink_Close: Close ends the Writes in flight, is idempotent, makes
// later Writes fail temporarily, and leaves the box's connection open.
func TestNATSSink_Close(t *testing.T) {
	tg := newNATSTarget(t)
	tg.SetDelay(t, time.Minute)
	s := tg.NewSink(t).(*sink.NATSSink)
	evs := sinktest.Events(2)
	done := make(chan []error, 1)
	go func() { done <- s.Write(context.Background(), evs) }()
	check.For(t, 5*time.Second, 10*time.Millisecond, func() error {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		if tg.inflight < len(evs) {
			return fmt.Errorf("%d requests reached the service, want %d", tg.inflight, len(evs))
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case errs := <-done:
		for i, err := range errs {
			if err == nil || sink.IsPermanent(err) || !errors.Is(err, net.ErrClosed) {
				t.Errorf("event %d cut by Close: want a temporary closed error, got %v", i, err)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Write in flight did not return after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for i, err := range s.Write(context.Background(), evs) {
		if err == nil || sink.IsPermanent(err) {
			t.Errorf("event %d after Close: want a temporary failure, got %v", i, err)
		}
	}
	if !tg.nc.IsConnected() {
		t.Fatal("Close closed the box's connection")
	}
	tg.SetDelay(t, 0)
	s2 := tg.NewSink(t).(*sink.NATSSink)
	defer s2.Close()
	for i, err := range s2.Write(context.Background(), evs) {
		if err != nil {
			t.Errorf("event %d with a new sink on the same connection: %v", i, err)
		}
	}
}

// TestNATSSink_ConnectionClosed: a closed connection is a temporary
// ErrUnavailable.
func TestNATSSink_ConnectionClosed(t *testing.T) {
	srv := startNATSServer(t)
	nc := connectNATS(t, srv)
	s := newNATSSink(t, nc, "svc.any", 0)
	nc.Close()
	for i, err := range s.Write(context.Background(), sinktest.Events(2)) {
		if !errors.Is(err, sink.ErrUnavailable) || !errors.Is(err, nats.ErrConnectionClosed) || sink.IsPermanent(err) {
			t.Errorf("event %d: want a temporary ErrUnavailable, got %v", i, err)
		}
	}
}

// BenchmarkNATS writes batches of 256 events to a micro service that
// answers at once.
func BenchmarkNATS(b *testing.B) {
	srv := startNATSServer(b)
	svcNC := connectNATS(b, srv)
	svc, err := micro.AddService(svcNC, micro.Config{
		Name:    "bench",
		Version: "1.0.0",
		Endpoint: &micro.EndpointConfig{
			Subject: "svc.bench",
			Handler: micro.HandlerFunc(func(req micro.Request) { req.Respond(nil) }),
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Stop() })
	if err := svcNC.Flush(); err != nil {
		b.Fatal(err)
	}
	s, err := sink.NewNATS(connectNATS(b, srv), topology.NATSSinkConfig{Subject: "svc.bench"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	evs := sinktest.Events(256)
	n := 0
	for b.Loop() {
		for i, err := range s.Write(context.Background(), evs) {
			if err != nil {
				b.Fatalf("event %d: %v", i, err)
			}
		}
		n += len(evs)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}
