package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"
)

// statusEnv runs an embedded JetStream server with a completion Service
// (origin tracking on L1A, edge1 and edge2 expected for every event) and
// its micro service, and writes an L1 config pointing at the server.
type statusEnv struct {
	cfg string
	js  jetstream.JetStream
	svc *completion.Service
}

func startStatusEnv(t *testing.T) *statusEnv {
	t.Helper()
	srv := jstest.Start(t, jstest.Options{})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, sc := range []jetstream.StreamConfig{
		{Name: "L1A", Subjects: []string{"events.>"}, MaxBytes: 64 << 20},
		{Name: "R1", Subjects: []string{"leafline.receipts.>"}},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := completion.NewService(completion.ServiceConfig{
		JS: js, Stream: "R1", OriginStream: "L1A", OverdueAfter: 200 * time.Millisecond,
		Expected: func(string) []string { return []string{"edge1", "edge2"} },
		Sites:    []string{"edge1", "edge2"},
		Streams:  []string{"L1A", "R1", "NOSUCH"},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	ms, err := status.StartMicro(nc, svc, status.MicroConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Stop() })

	dir := t.TempDir()
	writeJSONFile(t, filepath.Join(dir, "topology.json"), map[string]any{
		"sites": []map[string]any{
			{"name": "l1", "role": "l1", "leafnode": map[string]any{"listen": "127.0.0.1:7422"}},
			{"name": "hub", "role": "hub", "upstream": "l1", "leafnode": map[string]any{"listen": "127.0.0.1:7423"}},
			{"name": "edge1", "role": "edge", "upstream": "hub"},
			{"name": "edge2", "role": "edge", "upstream": "hub"},
		},
	})
	cfg := filepath.Join(dir, "l1.json")
	writeJSONFile(t, cfg, map[string]any{
		"topology": "topology.json", "site": "l1", "data_dir": filepath.Join(dir, "l1"),
		"nats": map[string]any{"listen": strings.TrimPrefix(srv.ClientURL(), "nats://")},
	})
	return &statusEnv{cfg: cfg, js: js, svc: svc}
}

func (e *statusEnv) event(t *testing.T, id string) {
	t.Helper()
	m := nats.NewMsg("events.x")
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func (e *statusEnv) receipt(t *testing.T, id, site string, st receipt.Status) {
	t.Helper()
	r := receipt.New(id, "L1A", site, site, st, time.Now())
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(context.Background(), "leafline.receipts."+site, b, jetstream.WithMsgID(r.MsgID())); err != nil {
		t.Fatal(err)
	}
}

// runStatusCmd runs a command function and returns its exit code and output.
func runStatusCmd(f func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := f(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestPendingAndSummaryCommands(t *testing.T) {
	env := startStatusEnv(t)
	env.event(t, "evt one") // a space: quoted in tables
	env.event(t, "evt-2")
	env.event(t, "evt-3")
	env.receipt(t, "evt-2", "edge1", receipt.StatusProcessed)
	env.receipt(t, "evt-2", "edge2", receipt.StatusProcessed)
	env.receipt(t, "evt-3", "edge1", receipt.StatusDeadLettered)

	// Table: overdue once 200ms have passed. Without --site only pending
	// events; per site every event the site owes (evt-3 is dead_lettered
	// at edge1 and still owed by edge2).
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		code, out, errs := runStatusCmd(cmdPending, "--config", env.cfg, "--overdue")
		if code != exitOK || !strings.Contains(out, `"evt one"`) || strings.Contains(out, "evt-2") || strings.Contains(out, "evt-3") {
			return fmt.Errorf("pending --overdue: %d\n%s%s", code, out, errs)
		}
		code, out, errs = runStatusCmd(cmdPending, "--config", env.cfg, "--overdue", "--site", "edge2")
		if code != exitOK || !strings.Contains(out, `"evt one"`) || !strings.Contains(out, "evt-3") {
			return fmt.Errorf("pending --overdue --site edge2: %d\n%s%s", code, out, errs)
		}
		return nil
	})
	code, out, _ := runStatusCmd(cmdPending, "--config", env.cfg, "--site", "edge2")
	for _, want := range []string{"EVENT_ID", "MISSING", `"evt one"`, "edge1,edge2", "evt-3", "dead_lettered", "yes"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("pending --site edge2 lacks %q (exit %d):\n%s", want, code, out)
		}
	}

	// JSON, paginated.
	code, out, _ = runStatusCmd(cmdPending, "--config", env.cfg, "--json", "--limit", "1", "--site", "edge2")
	var page status.ListPage
	if err := json.Unmarshal([]byte(out), &page); code != exitOK || err != nil || len(page.Items) != 1 || page.Next == "" {
		t.Fatalf("pending --json --limit 1: %d %v\n%s", code, err, out)
	}
	code, out, _ = runStatusCmd(cmdPending, "--config", env.cfg, "--json", "--limit", "1", "--site", "edge2", "--after", page.Next)
	var page2 status.ListPage
	if err := json.Unmarshal([]byte(out), &page2); code != exitOK || err != nil || len(page2.Items) != 1 || page2.Items[0].EventID == page.Items[0].EventID {
		t.Fatalf("second page: %d %v\n%s", code, err, out)
	}

	// Summary, table and JSON.
	code, out, _ = runStatusCmd(cmdSummary, "--config", env.cfg)
	for _, want := range []string{"events 3: pending 1, complete 1, dead_lettered 1", "SITE", "edge1", "edge2", "oldest pending: \"evt one\"", "applied 3",
		"STREAM  MESSAGES  BYTES", "64 MiB", "0%"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("summary lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	code, out, _ = runStatusCmd(cmdSummary, "--config", env.cfg, "--json")
	var sum record.Summary
	if err := json.Unmarshal([]byte(out), &sum); code != exitOK || err != nil || sum.Events != 3 || len(sum.Sites) != 2 || sum.Sites[1].Pending != 2 {
		t.Fatalf("summary --json: %d %v\n%s", code, err, out)
	}
	if len(sum.Streams) != 2 || sum.Streams[0].Stream != "L1A" || sum.Streams[0].Msgs != 3 || sum.Streams[0].Bytes == 0 || sum.Streams[0].MaxBytes != 64<<20 || sum.Streams[1].Stream != "R1" {
		t.Errorf("summary --json streams: %+v", sum.Streams)
	}
}

// TestWriteSummaryTable_Streams: the streams table shows each stream's
// messages, bytes and limits in binary units and its fill in whole
// percent ("-" without a limit), then a warning for each stream at 80% or
// more.
func TestWriteSummaryTable_Streams(t *testing.T) {
	var b strings.Builder
	writeSummaryTable(&b, record.Summary{OverdueAfter: "5m0s", Streams: []record.StreamFill{
		record.NewStreamFill("L1A", 64172851, 120_000, 64<<20, -1),
		record.NewStreamFill("R1", 2048, 4, -1, -1),
		record.NewStreamFill("RQ", 512, 800, 1<<30, 1000),
		record.NewStreamFill("LEAFLINE_AUDIT", 0, 0, 1<<30, 0),
	}})
	const want = `events 0: pending 0, complete 0, dead_lettered 0, expired 0, conflict 0, overdue 0 (pending longer than 5m0s)

STREAM          MESSAGES  BYTES     LIMIT                 FILL
L1A             120000    61.2 MiB  64 MiB                95%
R1              4         2 KiB     -                     -
RQ              800       512 B     1 GiB, 1000 messages  80%
LEAFLINE_AUDIT  0         0 B       1 GiB                 0%
warning: stream L1A is 95% full: it refuses new messages at its limit
warning: stream RQ is 80% full: it refuses new messages at its limit
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestPendingAndSummaryCommands_Errors(t *testing.T) {
	env := startStatusEnv(t)
	for _, tt := range []struct {
		name string
		f    func(context.Context, []string, io.Writer, io.Writer) int
		args []string
		code int
		want string
	}{
		{"pending no config", cmdPending, nil, exitUsage, "--config FILE is required"},
		{"pending bad limit", cmdPending, []string{"--config", env.cfg, "--limit", "0"}, exitUsage, "limit"},
		{"pending bad site", cmdPending, []string{"--config", env.cfg, "--site", "a.b"}, exitUsage, "site"},
		{"pending bad cursor", cmdPending, []string{"--config", env.cfg, "--after", "nope"}, exitUsage, "cursor"},
		{"pending extra arg", cmdPending, []string{"--config", env.cfg, "x"}, exitUsage, "unexpected argument"},
		{"summary no server", cmdSummary, []string{"--config", env.cfg, "--server", "nats://127.0.0.1:1"}, exitFailure, "connect"},
		{"summary no service", cmdSummary, []string{"--config", env.cfg, "--server", statusBareServer(t)}, exitFailure, "no status service"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runStatusCmd(tt.f, tt.args...)
			if code != tt.code || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d mentioning %q", code, errs, tt.code, tt.want)
			}
		})
	}
}

// statusBareServer runs a NATS server with no status service.
func statusBareServer(t *testing.T) string {
	t.Helper()
	return jstest.Run(t, &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true}).ClientURL()
}
