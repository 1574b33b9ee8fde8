package status_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"
)

func connectNC(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestStatusMicro(t *testing.T) {
	srv, js := jstest.StartJS(t, jstest.Options{})
	completiontest.CreateR1(t, js)
	completiontest.CreateL1A(t, js, 0)
	svc, err := completion.NewService(completiontest.TrackingConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	completiontest.Run(t, svc)
	ms, err := status.StartMicro(connectNC(t, srv), svc, status.MicroConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Stop()
	nc := connectNC(t, srv)
	client := status.NewStatusClient(nc, "")
	ctx := jstest.Ctx(t)

	for _, id := range trickyIDs {
		completiontest.SendReceipt(t, js, id, "edge-1", receipt.StatusProcessed)
	}
	completiontest.PublishEvent(t, js, "events.a.x", "micro-pending")
	for _, id := range trickyIDs {
		completiontest.WaitStatus(t, client, id, record.EventOriginUnknown) // never published: held
	}
	c := completiontest.WaitStatus(t, client, "micro-pending", record.EventPending)
	if len(c.Missing) != 2 {
		t.Fatalf("Get: %+v", c)
	}
	_, err = client.Get(ctx, "never-seen")
	var se *status.StatusError
	if !errors.Is(err, record.ErrNotFound) || !errors.As(err, &se) || se.Code != 404 {
		t.Errorf("unknown id: %v", err)
	}
	items, next, err := client.List(ctx, record.ListQuery{Status: record.ListPending, Site: "edge-2"})
	if err != nil || len(items) != 1 || items[0].EventID != "micro-pending" || next != "" {
		t.Errorf("List: %+v %q %v", items, next, err)
	}
	sum, err := client.Summary(ctx)
	if err != nil || sum.Events != int64(len(trickyIDs)+1) || sum.Instance == nil {
		t.Errorf("Summary: %+v %v", sum, err)
	}

	// Raw requests, as any NATS client would send them.
	for _, tt := range []struct {
		name, subject string
		body          []byte
		code          string
	}{
		{"empty id", "leafline.status.get", nil, "400"},
		{"invalid utf8", "leafline.status.get", []byte{0xff}, "400"},
		{"oversize id", "leafline.status.get", []byte(strings.Repeat("x", 5000)), "400"},
		{"unknown id", "leafline.status.get", []byte("nope"), "404"},
		{"list not json", "leafline.status.list", []byte("pending"), "400"},
		{"list unknown field", "leafline.status.list", []byte(`{"status":"pending","x":1}`), "400"},
		{"list trailing", "leafline.status.list", []byte(`{"status":"pending"}{}`), "400"},
		{"list bad limit", "leafline.status.list", []byte(`{"status":"pending","limit":5000}`), "400"},
		{"list oversize", "leafline.status.list", []byte(`{"status":"pending","after":"` + strings.Repeat("a", 5000) + `"}`), "400"},
		{"summary params", "leafline.status.summary", []byte(`{"x":1}`), "400"},
		{"summary ok", "leafline.status.summary", []byte(`{}`), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := nc.Request(tt.subject, tt.body, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Header.Get(micro.ErrorCodeHeader); got != tt.code {
				t.Fatalf("code %q (%s), want %q", got, m.Header.Get(micro.ErrorHeader), tt.code)
			}
			var body map[string]any
			if err := json.Unmarshal(m.Data, &body); err != nil {
				t.Fatalf("body not JSON: %s", m.Data)
			}
			if tt.code != "" && body["error"] == "" {
				t.Errorf("no error text: %s", m.Data)
			}
		})
	}

	// `nats micro info` sees the service and its endpoints.
	m, err := nc.Request("$SRV.INFO.leafline-status", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, e := range info.Endpoints {
		subjects = append(subjects, e.Subject)
	}
	if info.Name != "leafline-status" || strings.Join(subjects, ",") != "leafline.status.get,leafline.status.list,leafline.status.summary,leafline.status.unidentified" {
		t.Errorf("info %+v", info)
	}

	// The HTTP handler works over the micro client too (e.g. on another box).
	hs := httptest.NewServer(status.NewHTTPHandler(client))
	defer hs.Close()
	if code, body := getJSON(t, hs.URL+status.EventPath("a/b")); code != http.StatusOK || body["event_id"] != "a/b" {
		t.Errorf("http over micro: %d %v", code, body)
	}
	if code, _ := getJSON(t, hs.URL+status.EventPath("never-seen")); code != http.StatusNotFound {
		t.Errorf("http over micro, unknown: %d", code)
	}
}

func TestStatusMicro_NoService(t *testing.T) {
	srv, _ := jstest.StartJS(t, jstest.Options{})
	_, err := status.NewStatusClient(connectNC(t, srv), "").Summary(jstest.Ctx(t))
	if !errors.Is(err, record.ErrNotReady) {
		t.Fatalf("Summary without a service = %v, want ErrNotReady", err)
	}
}
