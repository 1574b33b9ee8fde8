package systest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"

	"github.com/leafline/leafline/internal/logx/logxtest"
	"github.com/leafline/leafline/topology"
)

// TestStorage_DataDirDeletedIsNotReady: a box whose data dir is deleted
// under it stops, answers /readyz 503 with the reason and exports
// leafline_storage_writable 0; it starts again by itself once the dir is
// back.
func TestStorage_DataDirDeletedIsNotReady(t *testing.T) {
	ls, err := newLocal(t.TempDir(), Options{Insecure: true, UnsignedReceipts: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	app, err := ls.Start(ctx, "l1")
	if err != nil {
		t.Fatal(err)
	}
	ready := "http://" + app.OpsAddr() + "/readyz"
	if code, err := getJSON(ready, nil); code != http.StatusOK {
		t.Fatalf("/readyz %d %v before the fault", code, err)
	}
	dir := ls.Configs["l1"].DataDir
	// rm -rf, as an operator would; the running server may write a file
	// meanwhile, so try again until the dir is gone.
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error { return os.RemoveAll(dir) })
	check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
		var r box.Readiness
		code, err := getJSON(ready, &r)
		if code != http.StatusServiceUnavailable || !strings.Contains(r.Reason, "storage not writable") {
			return fmt.Errorf("/readyz %d %+v %v", code, r, err)
		}
		if v := metricValue(t, app.OpsAddr(), "leafline_storage_writable"); v != "0" {
			return fmt.Errorf("leafline_storage_writable %s", v)
		}
		return nil
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the box recreated its deleted data dir: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if code, err := getJSON(ready, nil); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %v after the dir came back", code, err)
		}
		if v := metricValue(t, app.OpsAddr(), "leafline_storage_writable"); v != "1" {
			return fmt.Errorf("leafline_storage_writable %s", v)
		}
		return nil
	})
}

// TestL1_UnidentifiedOriginMessagesCountedAndListed: origin messages
// without a usable event_id (none, empty, too long) are recorded at L1
// before they are ACKed: counted in the summary and in /metrics, listed by
// the status service and GET /v1/unidentified, and still there after a
// restart. Every JSON log line of the box names each key once.
func TestL1_UnidentifiedOriginMessagesCountedAndListed(t *testing.T) {
	var logs logxtest.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ls, err := newLocal(t.TempDir(), Options{Insecure: true, UnsignedReceipts: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	app, err := ls.Start(ctx, "l1")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(app.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var seqs []uint64
	for _, id := range []string{"", "-", strings.Repeat("x", 600)} {
		m := nats.NewMsg("events.bad")
		switch id {
		case "":
		case "-":
			m.Header.Set(jetstream.MsgIDHeader, "")
			m.Header.Set("Other", "x")
		default:
			m.Header.Set(jetstream.MsgIDHeader, id)
		}
		m.Data = []byte(`{"secret":"PAYLOAD"}`)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	good := publishN(t, js, "good", 1)

	client := status.NewStatusClient(nc, "")
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		sum, err := client.Summary(ctx)
		if err != nil {
			return err
		}
		if sum.Unidentified != 3 || sum.Events != 1 {
			return fmt.Errorf("summary: unidentified %d events %d", sum.Unidentified, sum.Events)
		}
		if v := metricValue(t, app.OpsAddr(), "leafline_completion_origin_unidentified"); v != "3" {
			return fmt.Errorf("leafline_completion_origin_unidentified %s", v)
		}
		return nil
	})
	page, err := client.Unidentified(ctx, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 || page.Next == "" {
		t.Fatalf("first page %+v", page)
	}
	rest, err := client.Unidentified(ctx, page.Next, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest.Items) != 1 || rest.Next != "" {
		t.Fatalf("second page %+v", rest)
	}
	// Listed in the order they were recorded: each once, with its reason.
	reasons := map[uint64]string{}
	for _, u := range append(page.Items, rest.Items...) {
		reasons[u.Seq] = u.Reason
	}
	for i, want := range []string{"missing", "missing", "600 bytes"} {
		if !strings.Contains(reasons[seqs[i]], want) {
			t.Fatalf("origin seq %d: reason %q, want it to say %q (listed: %v)", seqs[i], reasons[seqs[i]], want, reasons)
		}
	}
	var httpPage record.UnidentifiedPage
	if code, err := getJSON("http://"+app.OpsAddr()+"/v1/unidentified", &httpPage); code != http.StatusOK || len(httpPage.Items) != 3 {
		t.Fatalf("GET /v1/unidentified: %d %v %+v", code, err, httpPage)
	}
	if _, err := client.Get(ctx, good[0]); err != nil {
		t.Fatalf("the good event: %v", err)
	}

	// Durable: a restarted L1 still counts them, once each.
	if err := ls.Stop("l1"); err != nil {
		t.Fatal(err)
	}
	if app, err = ls.Start(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if v := metricValue(t, app.OpsAddr(), "leafline_completion_origin_unidentified"); v != "3" {
			return fmt.Errorf("after a restart: leafline_completion_origin_unidentified %s", v)
		}
		return nil
	})

	out := logs.String()
	if strings.Contains(out, "PAYLOAD") {
		t.Fatal("a log line carries a payload")
	}
	if !strings.Contains(out, "recorded as unidentified") {
		t.Fatal("no log line for the unidentified origin messages")
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		dups, err := logxtest.DuplicateKeys([]byte(line))
		if err != nil || len(dups) > 0 {
			t.Fatalf("log line repeats keys %v (%v): %s", dups, err, line)
		}
	}
}

// TestSystem_EventIDReusedWithAnotherPayload: the same event_id published
// again with another payload (as after the origin stream's duplicate
// window: here the event_id is read from a header JetStream does not
// dedupe) is counted and logged at the edge and recorded at L1, where the
// event becomes a conflict; the same payload again is neither.
func TestSystem_EventIDReusedWithAnotherPayload(t *testing.T) {
	const header = "Leafline-Test-Event-Id"
	ls := testSystem(t, Options{Insecure: true, UnsignedReceipts: true, Configure: func(c *topology.Config) {
		c.EventID.Header = header
	}}, nil)
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	publish := func(id, data string) {
		t.Helper()
		m := nats.NewMsg("events.test")
		m.Header.Set(header, id)
		m.Data = []byte(data)
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	svc := leafline.Completions(ls.App("l1"))
	edgeReused := func() float64 { return metricOf(t, ls.App("edge1"), "leafline_event_id_reused_total", nil) }
	publish("order-7", `{"qty":1}`)
	waitCompleted(t, ls, []string{"order-7"}, "edge1")
	publish("order-7", `{"qty":1}`) // the same event again: a duplicate, no more
	publish("order-7", `{"qty":2}`) // the id reused for another payload
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n := edgeReused(); n != 1 {
			return fmt.Errorf("edge: event_id_reused_total %v", n)
		}
		if st := svc.Stats(); st.OriginReused != 1 || st.OriginReceived != 3 {
			return fmt.Errorf("L1 stats %+v", st)
		}
		return nil
	})
	ctx := context.Background()
	c, err := svc.Get(ctx, "order-7")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Conflict || len(c.Reused) != 1 || c.Reused[0].PayloadSHA256 != receipt.PayloadDigest([]byte(`{"qty":2}`)) ||
		c.PayloadSHA256 != receipt.PayloadDigest([]byte(`{"qty":1}`)) || c.Status != record.EventComplete {
		t.Fatalf("L1 record %+v", c)
	}
	items, _, err := svc.List(ctx, record.ListQuery{Status: record.ListConflict, Limit: 10})
	if err != nil || len(items) != 1 || items[0].EventID != "order-7" {
		t.Fatalf("?status=conflict: %v %+v", err, items)
	}
	if n := edgeReused(); n != 1 {
		t.Fatalf("edge: event_id_reused_total %v after the drain", n)
	}
}

// TestEdge_SecondBoxOnTheSameDataDir: a second edge box on a running box's
// data dir stops on the outbox lock, naming it, before it starts an
// embedded server on the first box's store.
func TestEdge_SecondBoxOnTheSameDataDir(t *testing.T) {
	ls, err := newLocal(t.TempDir(), Options{Insecure: true, UnsignedReceipts: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ls.StartAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, site := range []string{"l1", "hub", "edge1"} {
		t.Run(site, func(t *testing.T) {
			cfg := *ls.Configs[site] // its listeners are on port 0: no clash
			second, err := leafline.New(&cfg, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			err = second.Run(ctx)
			started := second.Server() != nil
			if err == nil || !strings.Contains(err.Error(), "in use by another leafline box") {
				t.Fatalf("second box: %v", err)
			}
			if started {
				t.Fatal("the second box started an embedded server before it failed on the data dir's lock")
			}
			if code, err := getJSON("http://"+ls.App(site).OpsAddr()+"/readyz", nil); code != http.StatusOK {
				t.Fatalf("the first box: /readyz %d %v", code, err)
			}
		})
	}
}
