package status_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
	"github.com/leafline/leafline/status"
)

// trickyIDs are valid event_ids that stress every layer: path separators,
// escapes, KV/subject wildcards, dots, whitespace, unicode.
var trickyIDs = []string{
	"plain", "a/b", "/leading", "trailing/", "a//b", "a%2Fb", "100%", "%zz", "with space", "tab\there", "line\nbreak",
	"dots.in.id", ".", "..", "../../etc/passwd", "a/./b", "*", ">", "a.*.>", "q?x=1#frag", "+plus+", "ünïcødé 😀",
	`"quoted" <html> & 'single'`, "\u2028sep", strings.Repeat("é", receipt.MaxEventIDLen/2),
}

func getJSON(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q, body %s", url, ct, b)
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%s: body is not a JSON object: %s", url, b)
	}
	return resp.StatusCode, body
}

func TestStatusHTTP_EventIDsRoundTrip(t *testing.T) {
	svc, js := completiontest.StartTracking(t, nil)
	srv := httptest.NewServer(status.NewHTTPHandler(svc))
	defer srv.Close()
	for _, id := range trickyIDs {
		completiontest.SendReceipt(t, js, id, "edge-1", receipt.StatusProcessed)
	}
	// Never published: each receipt is held, its event origin_unknown.
	check.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		if st := svc.Stats(); st.Held != uint64(len(trickyIDs)) {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	for _, id := range trickyIDs {
		t.Run(fmt.Sprintf("%.20q", id), func(t *testing.T) {
			code, body := getJSON(t, srv.URL+status.EventPath(id))
			if code != http.StatusOK || body["event_id"] != id || body["status"] != string(record.EventOriginUnknown) {
				t.Fatalf("GET %s: %d %v", status.EventPath(id), code, body)
			}
		})
	}
	code, body := getJSON(t, srv.URL+status.EventPath("never-seen"))
	if code != http.StatusNotFound || body["error"] != "unknown event_id" || body["event_id"] != "never-seen" {
		t.Errorf("unknown id: %d %v", code, body)
	}
	// Unescaped slashes are part of the id too.
	if code, body := getJSON(t, srv.URL+"/v1/events/a/b"); code != http.StatusOK || body["event_id"] != "a/b" {
		t.Errorf("unescaped slash: %d %v", code, body)
	}
}

func TestStatusHTTP_ListAndSummary(t *testing.T) {
	svc, js := completiontest.StartTracking(t, nil)
	srv := httptest.NewServer(status.NewHTTPHandler(svc))
	defer srv.Close()
	for i := 0; i < 5; i++ {
		completiontest.PublishEvent(t, js, "events.a.x", receipttest.EventID(i))
	}
	completiontest.SendReceipt(t, js, receipttest.EventID(0), "edge-2", receipt.StatusDeadLettered)
	for i := 1; i < 5; i++ {
		completiontest.WaitStatus(t, svc, receipttest.EventID(i), record.EventPending)
	}
	// The receipt may be applied before the origin: wait for both.
	check.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		c, err := svc.Get(jstest.Ctx(t), receipttest.EventID(0))
		if err != nil || c.Status != record.EventDeadLettered || !c.OriginKnown() {
			return fmt.Errorf("%+v %v", c, err)
		}
		return nil
	})

	var ids []string
	next := ""
	for {
		q := record.ListQuery{Status: record.ListPending, Site: "edge-1", Limit: 2, After: next}
		code, body := getJSON(t, srv.URL+"/v1/events?"+q.Encode())
		if code != http.StatusOK {
			t.Fatalf("list: %d %v", code, body)
		}
		for _, it := range body["items"].([]any) {
			ids = append(ids, it.(map[string]any)["event_id"].(string))
		}
		n, _ := body["next"].(string)
		if n == "" {
			break
		}
		next = n
	}
	if len(ids) != 5 {
		t.Errorf("pending at edge-1: %q", ids)
	}
	code, body := getJSON(t, srv.URL+"/v1/events?status=dead_lettered")
	if items := body["items"].([]any); code != http.StatusOK || len(items) != 1 || body["next"] != nil {
		t.Errorf("dead_lettered: %d %v", code, body)
	}
	code, body = getJSON(t, srv.URL+"/v1/summary")
	if code != http.StatusOK || body["events"] != 5.0 || body["pending"] != 4.0 || body["dead_lettered"] != 1.0 {
		t.Errorf("summary: %d %v", code, body)
	}
}

func TestStatusHTTP_BadRequests(t *testing.T) {
	svc, _ := completiontest.StartTracking(t, nil)
	srv := httptest.NewServer(status.NewHTTPHandler(svc))
	defer srv.Close()
	for _, tt := range []struct {
		name, method, path string
		code               int
		mention            string
	}{
		{"invalid utf8", "GET", "/v1/events/%FF", 400, "UTF-8"},
		{"NUL", "GET", "/v1/events/a%00b", 400, "NUL"},
		{"empty id", "GET", "/v1/events/", 400, "empty"},
		{"id too long", "GET", "/v1/events/" + strings.Repeat("x", receipt.MaxEventIDLen+1), 400, "513 bytes"},
		{"path too long", "GET", "/v1/events/" + strings.Repeat("%41", receipt.MaxEventIDLen+30), 414, "too long"},
		{"query on get", "GET", "/v1/events/x?y=1", 400, "no query"},
		{"no status", "GET", "/v1/events", 400, "status: required"},
		{"bad status", "GET", "/v1/events?status=done", 400, `"done"`},
		{"limit zero", "GET", "/v1/events?status=pending&limit=0", 400, "limit"},
		{"limit big", "GET", "/v1/events?status=pending&limit=1001", 400, "limit"},
		{"limit text", "GET", "/v1/events?status=pending&limit=ten", 400, "limit"},
		{"limit sign", "GET", "/v1/events?status=pending&limit=+5", 400, "limit"},
		{"repeated", "GET", "/v1/events?status=pending&status=overdue", 400, "2 times"},
		{"unknown param", "GET", "/v1/events?status=pending&colour=red", 400, `"colour"`},
		{"empty param", "GET", "/v1/events?status=pending&site=", 400, "site: empty"},
		{"bad site", "GET", "/v1/events?status=pending&site=a.b", 400, "site"},
		{"bad cursor", "GET", "/v1/events?status=pending&after=zzz", 400, "cursor"},
		{"malformed query", "GET", "/v1/events?status=%zz", 400, "malformed"},
		{"huge query", "GET", "/v1/events?status=pending&after=" + strings.Repeat("a", 5000), 414, "too long"},
		{"summary params", "GET", "/v1/summary?x=1", 400, "no query"},
		{"post", "POST", "/v1/events/x", 405, "POST"},
		{"unknown route", "GET", "/v1/other", 404, "no such route"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body map[string]string
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("body not JSON: %v", err)
			}
			if resp.StatusCode != tt.code || !strings.Contains(body["error"], tt.mention) {
				t.Errorf("%d %q; want %d mentioning %q", resp.StatusCode, body["error"], tt.code, tt.mention)
			}
		})
	}
}

func TestStatusHTTP_NotReady(t *testing.T) {
	svc, err := completion.NewService(completion.ServiceConfig{JS: jstest.Unconnected(t), Stream: "R1"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(status.NewHTTPHandler(svc))
	defer srv.Close()
	for _, path := range []string{"/v1/events/x", "/v1/events?status=pending", "/v1/summary"} {
		if code, body := getJSON(t, srv.URL+path); code != http.StatusServiceUnavailable || !strings.Contains(body["error"].(string), "not ready") {
			t.Errorf("%s: %d %v", path, code, body)
		}
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Retry-After"); got != status.RetryAfter {
			t.Errorf("%s: Retry-After %q, want %q", path, got, status.RetryAfter)
		}
	}
}
