package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/topology"
)

// writeMetricsConfig writes a topology and an l1 box config whose ops
// address is opsListen, and returns the config's path.
func writeMetricsConfig(t *testing.T, opsListen string) string {
	t.Helper()
	dir := t.TempDir()
	writeJSONFile(t, filepath.Join(dir, "topology.json"), map[string]any{
		"sites": []map[string]any{
			{"name": "l1", "role": "l1", "leafnode": map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", freePort(t))}},
			{"name": "hub", "role": "hub", "upstream": "l1", "leafnode": map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", freePort(t))}},
			{"name": "edge1", "role": "edge", "upstream": "hub"},
		},
	})
	path := filepath.Join(dir, "l1.json")
	writeJSONFile(t, path, map[string]any{
		"topology": "topology.json",
		"site":     "l1",
		"data_dir": filepath.Join(dir, "data"),
		"nats":     map[string]any{"listen": "127.0.0.1:0"},
		"ops":      map[string]any{"listen": opsListen},
	})
	return path
}

// fakeBox serves a registry like a box's: leafline_* families with the
// site/role const labels, plus the Go collector's families.
func fakeBox(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	labels := prometheus.Labels{"site": "edge1", "role": "edge"}
	acked := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "leafline", Name: "messages_acked_total", Help: "acked", ConstLabels: labels})
	acked.Add(3)
	conf := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "leafline", Name: "ack_confirmation_seconds", Help: "conf", ConstLabels: labels})
	conf.Observe(0.25)
	conf.Observe(0.5)
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "leafline", Name: "source_lag", Help: "lag", ConstLabels: labels}, []string{"stream", "source"})
	lag.WithLabelValues("L2A", "HA").Set(7)
	lag.WithLabelValues("RH", "RE").Set(0)
	odd := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "leafline", Name: "odd", Help: "not finite", ConstLabels: labels})
	odd.Set(math.Inf(1))
	reg.MustRegister(acked, conf, lag, odd)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String()
}

func runMetrics(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cmdMetrics(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestMetrics_Table(t *testing.T) {
	cfg := writeMetricsConfig(t, fakeBox(t))
	code, out, errs := runMetrics(t, "--config", cfg)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	t.Logf("\n%s", out)
	for _, want := range []string{
		`role="edge" site="edge1"`,
		"NAME", "LABELS", "VALUE",
		"leafline_messages_acked_total",
		"count=2 sum=0.75",
		`source="HA",stream="L2A"`,
		"+Inf",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "go_") {
		t.Error("output holds non-leafline families")
	}
	// The shared labels are printed once, not on every row.
	if n := strings.Count(out, `site="edge1"`); n != 1 {
		t.Errorf("site label printed %d times", n)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "leafline_messages_acked_total") && !strings.HasSuffix(strings.TrimSpace(line), " 3") {
			t.Errorf("acked row %q", line)
		}
	}
}

func TestMetrics_JSON(t *testing.T) {
	cfg := writeMetricsConfig(t, fakeBox(t))
	code, out, errs := runMetrics(t, "--config", cfg, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Source  string `json:"source"`
		Metrics []struct {
			Name   string            `json:"name"`
			Type   string            `json:"type"`
			Help   string            `json:"help"`
			Labels map[string]string `json:"labels"`
			Value  any               `json:"value"`
			Count  *uint64           `json:"count"`
			Sum    any               `json:"sum"`
		} `json:"metrics"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.HasSuffix(rep.Source, "/metrics") {
		t.Errorf("source %q", rep.Source)
	}
	seen := map[string]bool{}
	for _, m := range rep.Metrics {
		if !strings.HasPrefix(m.Name, "leafline_") {
			t.Errorf("non-leafline family %s", m.Name)
		}
		if m.Labels["site"] != "edge1" || m.Labels["role"] != "edge" {
			t.Errorf("%s labels %v", m.Name, m.Labels)
		}
		key := m.Name + "/" + m.Labels["stream"]
		seen[key] = true
		switch key {
		case "leafline_messages_acked_total/":
			if m.Type != "counter" || m.Value != 3.0 {
				t.Errorf("acked %+v", m)
			}
		case "leafline_ack_confirmation_seconds/":
			if m.Type != "histogram" || m.Count == nil || *m.Count != 2 || m.Sum != 0.75 || m.Value != nil {
				t.Errorf("histogram %+v", m)
			}
		case "leafline_source_lag/L2A":
			if m.Value != 7.0 || m.Labels["source"] != "HA" {
				t.Errorf("lag %+v", m)
			}
		case "leafline_source_lag/RH":
			if m.Value != 0.0 {
				t.Errorf("zero gauge %+v (a zero value must still be printed)", m)
			}
		case "leafline_odd/":
			if m.Value != "+Inf" {
				t.Errorf("non-finite gauge %+v", m)
			}
		}
	}
	if len(seen) != 5 {
		t.Errorf("samples %v, want 5", seen)
	}
}

func TestMetrics_Errors(t *testing.T) {
	// Nothing listens on the configured ops address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notFound.Close)
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "leafline_x{ this is not the exposition format\n")
	}))
	t.Cleanup(garbage.Close)

	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no_config", nil, exitUsage, "--config FILE is required"},
		{"missing_config", []string{"--config", filepath.Join(t.TempDir(), "nope.json")}, exitUsage, "nope.json"},
		{"extra_argument", []string{"--config", "x", "extra"}, exitUsage, "unexpected argument"},
		{"bad_timeout", []string{"--config", writeMetricsConfig(t, dead), "--timeout", "0s"}, exitUsage, "--timeout"},
		{"box_not_running", []string{"--config", writeMetricsConfig(t, dead)}, exitFailure, "is the box running?"},
		{"http_404", []string{"--config", writeMetricsConfig(t, dead), "--url", notFound.URL + "/metrics"}, exitFailure, "404"},
		{"not_metrics", []string{"--config", writeMetricsConfig(t, dead), "--url", garbage.URL}, exitFailure, "cannot parse metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runMetrics(t, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, errs, tc.code, tc.msg)
			}
		})
	}
}

func TestMetricsURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8222": "http://127.0.0.1:8222/metrics",
		"0.0.0.0:8222":   "http://127.0.0.1:8222/metrics",
		":8222":          "http://127.0.0.1:8222/metrics",
		"[::]:8222":      "http://[::1]:8222/metrics",
		"[::1]:9":        "http://[::1]:9/metrics",
	} {
		if got, err := metricsURL(in); err != nil || got != want {
			t.Errorf("metricsURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"127.0.0.1:0", "nohost", "127.0.0.1:x"} {
		if _, err := metricsURL(in); err == nil {
			t.Errorf("metricsURL(%q): no error", in)
		}
	}
}

// Against a real running box: an L1 started from the same config file.
func TestMetrics_RunningBox(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded server")
	}
	path := writeMetricsConfig(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	cfg, err := topology.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	app, err := leafline.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("box did not stop")
		}
	})
	select {
	case <-app.Ready():
	case err := <-done:
		t.Fatalf("box stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("box not ready")
	}
	code, out, errs := runMetrics(t, "--config", path)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{`role="l1" site="l1"`, "leafline_storage_writable", "leafline_completion_applied_total", "leafline_link_violations_total"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runMetrics(t, "--config", path, "--json")
	if code != exitOK || !json.Valid([]byte(out)) {
		t.Fatalf("exit %d, %s: %s", code, errs, out)
	}
}
