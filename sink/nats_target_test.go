package sink_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// startNATSServer runs an in-process nats-server on a random local port.
func startNATSServer(t testing.TB) *server.Server {
	t.Helper()
	return jstest.Run(t, &server.Options{Host: "127.0.0.1", Port: -1, MaxPayload: 4 << 20, NoLog: true})
}

func connectNATS(t testing.TB, srv *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func natsTestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newNATSSink(t testing.TB, nc *nats.Conn, subject string, maxConcurrency int) *sink.NATSSink {
	t.Helper()
	s, err := sink.NewNATS(nc, topology.NATSSinkConfig{
		Subject:        subject,
		Timeout:        topology.Duration(natsTestTimeout),
		MaxConcurrency: maxConcurrency,
	}, natsTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// natsTarget is an idempotent micro service on the test server: it keeps
// one record per event_id, and works on each request on a goroutine of its
// own, as a service that does slow work concurrently would. That goroutine
// replies with a plain publish to the request's reply subject: a micro
// Request may only be answered inside its handler, which keeps statistics
// of the answer once the handler returns.
type natsTarget struct {
	nc      *nats.Conn // the sinks' connection
	svcNC   *nats.Conn // the service's connection
	subject string
	quit    chan struct{}
	work    sync.WaitGroup

	mu          sync.Mutex
	stopped     bool // quit is closed: start no more work
	svc         micro.Service
	records     map[string][]byte
	requests    map[string]int
	refusals    map[string]natsRefusal
	delay       time.Duration
	garble      string
	inflight    int
	maxInflight int
}

type natsRefusal struct {
	permanent bool
	times     int
}

func newNATSTarget(t *testing.T) *natsTarget {
	t.Helper()
	srv := startNATSServer(t)
	tg := &natsTarget{
		nc:       connectNATS(t, srv),
		svcNC:    connectNATS(t, srv),
		subject:  "svc.orders.apply",
		quit:     make(chan struct{}),
		records:  map[string][]byte{},
		requests: map[string]int{},
		refusals: map[string]natsRefusal{},
	}
	t.Cleanup(func() {
		tg.mu.Lock()
		tg.stopped = true
		close(tg.quit)
		tg.mu.Unlock()
		tg.work.Wait()
	})
	tg.SetDown(t, false)
	return tg
}

func (tg *natsTarget) NewSink(t *testing.T) sink.Sink {
	s, err := sink.NewNATS(tg.nc, topology.NATSSinkConfig{
		Subject:        tg.subject,
		Timeout:        topology.Duration(natsTestTimeout),
		MaxConcurrency: 16,
	}, natsTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (tg *natsTarget) Stored(t *testing.T, id string) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if _, ok := tg.records[id]; ok {
		return 1
	}
	return 0
}

func (tg *natsTarget) Refuse(t *testing.T, id string, permanent bool, times int) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.refusals[id] = natsRefusal{permanent: permanent, times: times}
}

// SetDown stops the micro service (requests then find no responders) or
// starts it again, and waits until the server routes accordingly.
func (tg *natsTarget) SetDown(t *testing.T, down bool) {
	t.Helper()
	tg.mu.Lock()
	if down && tg.svc != nil {
		if err := tg.svc.Stop(); err != nil {
			t.Fatal(err)
		}
		tg.svc = nil
	}
	if !down && tg.svc == nil {
		svc, err := micro.AddService(tg.svcNC, micro.Config{
			Name:    "orders",
			Version: "1.0.0",
			Endpoint: &micro.EndpointConfig{
				Subject: tg.subject,
				Handler: micro.HandlerFunc(tg.accept),
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		tg.svc = svc
	}
	tg.mu.Unlock()
	// A probe without an event_id: the service answers it with a 400.
	check.For(t, 5*time.Second, 10*time.Millisecond, func() error {
		_, err := tg.nc.Request(tg.subject, nil, time.Second)
		if down == errors.Is(err, nats.ErrNoResponders) {
			return nil
		}
		return fmt.Errorf("service down=%v not yet seen by the server (probe: %v)", down, err)
	})
}

func (tg *natsTarget) SetDelay(t *testing.T, d time.Duration) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.delay = d
}

func (tg *natsTarget) Garble(t *testing.T, how string) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.garble = how
}

// accept is the micro handler: it refuses a request without an event_id,
// and hands the others to a goroutine of their own.
func (tg *natsTarget) accept(req micro.Request) {
	id := req.Headers().Get(sink.NATSHeaderEventID)
	if id == "" {
		req.Error("400", "no Leafline-Event-Id header", nil)
		return
	}
	data, reply := bytes.Clone(req.Data()), req.Reply()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.stopped {
		return
	}
	tg.work.Add(1)
	go func() {
		defer tg.work.Done()
		tg.handle(id, data, reply)
	}()
}

func (tg *natsTarget) handle(id string, data []byte, reply string) {
	tg.mu.Lock()
	tg.requests[id]++
	tg.inflight++
	tg.maxInflight = max(tg.maxInflight, tg.inflight)
	delay := tg.delay
	tg.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-tg.quit:
			return
		}
	}

	tg.mu.Lock()
	// Out of flight before the answer: once answered, the sink may send
	// the next request before this goroutine runs again.
	tg.inflight--
	ref, refused := tg.refusals[id]
	if refused && !ref.permanent {
		if ref.times--; ref.times <= 0 {
			delete(tg.refusals, id)
		} else {
			tg.refusals[id] = ref
		}
	}
	if !refused {
		if _, done := tg.records[id]; !done {
			tg.records[id] = data
		}
	}
	garble := tg.garble
	tg.mu.Unlock()

	answer := &nats.Msg{Subject: reply}
	switch {
	case refused && ref.permanent:
		answer.Header = nats.Header{
			sink.NATSHeaderResult: {sink.ResultFail},
			sink.NATSHeaderError:  {"validation failed"},
		}
	case refused:
		answer.Header = nats.Header{sink.NATSHeaderResult: {sink.ResultRetry}}
	case garble == "malformed":
		answer.Data = []byte("not json")
	case garble == "oversize":
		// A well-formed ok, but far too large to be read.
		answer.Data, _ = json.Marshal(sink.Result{EventID: id, Result: sink.ResultOK, Error: strings.Repeat("x", natsOversize)})
	}
	tg.svcNC.PublishMsg(answer) // a failure is a lost answer: the sink times out
}
