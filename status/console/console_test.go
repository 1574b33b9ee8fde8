package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/completion/record"
)

func TestLinkWatcher_SinceIsTheLastChange(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := NewLinkWatcher("hub", []string{"edge2", "edge1"}, t0)
	steps := []struct {
		connected map[string]bool
		want      map[string]SiteLink
	}{
		{map[string]bool{}, map[string]SiteLink{"edge1": {Site: "edge1", Connected: false, Since: t0}, "edge2": {Site: "edge2", Connected: false, Since: t0}}},
		{map[string]bool{"edge1": true, "edge2": true}, map[string]SiteLink{"edge1": {Site: "edge1", Connected: true, Since: t0.Add(time.Second)}, "edge2": {Site: "edge2", Connected: true, Since: t0.Add(time.Second)}}},
		{map[string]bool{"edge1": true, "other": true}, map[string]SiteLink{"edge1": {Site: "edge1", Connected: true, Since: t0.Add(time.Second)}, "edge2": {Site: "edge2", Connected: false, Since: t0.Add(2 * time.Second)}}},
		{map[string]bool{"edge1": true}, map[string]SiteLink{"edge1": {Site: "edge1", Connected: true, Since: t0.Add(time.Second)}, "edge2": {Site: "edge2", Connected: false, Since: t0.Add(2 * time.Second)}}},
	}
	for i, st := range steps {
		b := w.Observe(st.connected, t0.Add(time.Duration(i)*time.Second))
		if b.Hub != "hub" || len(b.Sites) != 2 || b.Sites[0].Site != "edge1" {
			t.Fatalf("step %d: beat %+v", i, b)
		}
		for _, l := range b.Sites {
			if l != st.want[l.Site] {
				t.Errorf("step %d: %s = %+v, want %+v", i, l.Site, l, st.want[l.Site])
			}
		}
	}
}

func TestLinkTracker_States(t *testing.T) {
	start := time.Now().Add(-time.Minute)
	down := time.Now().Add(-10 * time.Second)
	lt := linkTracker{beats: map[string]LinkBeat{}, heard: map[string]time.Time{}}
	if l := lt.link("edge1", "hub", time.Now(), start, 5*time.Second); l.State != "unknown" || !l.Since.Equal(start) {
		t.Errorf("never heard: %+v", l)
	}
	lt.beats["hub"] = LinkBeat{Hub: "hub", Sites: []SiteLink{
		{Site: "edge1", Connected: true, Since: start, BytesIn: 300, BytesOut: 4000},
		{Site: "edge2", Connected: false, Since: down},
	}}
	lt.heard["hub"] = time.Now()
	for site, want := range map[string]Link{
		"edge1": {State: "online", Since: start, Via: "hub", Down: 4000, Up: 300},
		"edge2": {State: "offline", Since: down, Via: "hub"},
		"edge9": {State: "unknown", Since: start, Via: "hub"},
	} {
		if got := lt.link(site, "hub", time.Now(), start, 5*time.Second); got != want {
			t.Errorf("%s: %+v, want %+v", site, got, want)
		}
	}
	heard := time.Now().Add(-6 * time.Second)
	lt.heard["hub"] = heard
	if l := lt.link("edge1", "hub", time.Now(), start, 5*time.Second); l.State != "unknown" || !l.Since.Equal(heard) {
		t.Errorf("stale hub: %+v, want unknown since the last beat", l)
	}
}

func TestRing_KeepsTheLastHour(t *testing.T) {
	r := newRing(3)
	t0 := time.Now()
	for i := int64(1); i <= 5; i++ {
		r.add(sample{at: t0.Add(time.Duration(i) * time.Minute), v: i})
	}
	if got := r.values(t0); len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Errorf("values = %v, want [3 4 5]", got)
	}
	if got := r.values(t0.Add(4 * time.Minute)); len(got) != 1 || got[0] != 5 {
		t.Errorf("values since minute 4 = %v, want [5]", got)
	}
}

func TestSparkline(t *testing.T) {
	for _, tc := range []struct {
		in   []int64
		want string
	}{
		{nil, ""},
		{[]int64{0}, "0.0,19.0 100.0,19.0"},
		{[]int64{0, 5, 10}, "0.0,19.0 50.0,10.0 100.0,1.0"},
	} {
		if got := sparkline(tc.in); got != tc.want {
			t.Errorf("sparkline(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// testConsole is a console with no completion service and no NATS: the
// page must still render and say why counts are missing.
func testConsole() *Console {
	c := &Console{cfg: Config{Source: func() record.StatusSource { return nil }, Sites: map[string]string{"edge1": "hub"}},
		start: time.Now(), trend: map[string]*ring{"edge1": newRing(4)}}
	c.cfg.setDefaults()
	c.links = linkTracker{beats: map[string]LinkBeat{}, heard: map[string]time.Time{}}
	c.last = c.snapshot(t0ctx, nil, errNoService)
	return c
}

func TestHandler_Routes(t *testing.T) {
	h := testConsole().Handler()
	for _, tc := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/console/", 200, `data-site="edge1"`},
		{"GET", "/console/", 200, "completion service is not running"},
		{"GET", "/console/sites", 200, `data-link="unknown"`},
		{"GET", "/console/sites", 200, `↓ <span class="down">0 B</span>`},
		{"GET", "/console/streams", 200, "Stream figures unavailable: the completion service is not running"},
		{"GET", "/console/events?status=dead_lettered", 200, "completion service is not running"},
		{"GET", "/console/events?status=complete", 400, "must be overdue, dead_lettered or expired"},
		{"GET", "/console/event?id=", 200, "event_id"},
		{"GET", "/console/state.json", 200, `"site":"edge1"`},
		{"GET", "/console/assets/console.js", 200, "setInterval"},
		{"POST", "/console/", 405, "read-only"},
		{"DELETE", "/console/event?id=x", 405, "read-only"},
		{"GET", "/console/?" + strings.Repeat("a", 5000), 414, "too long"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s %.40s: %d %.200q, want %d containing %q", tc.method, tc.path, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
		if tc.code == 200 && rec.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("%s %.40s: no Content-Security-Policy", tc.method, tc.path)
		}
	}
}

func TestHandler_EscapesEventIDs(t *testing.T) {
	rec := httptest.NewRecorder()
	testConsole().Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/event?id=%3Cscript%3Ex", nil))
	if strings.Contains(rec.Body.String(), "<script>x") {
		t.Fatalf("event id not escaped: %s", rec.Body.String())
	}
}

var t0ctx = context.Background()

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 12345: "12.3 kB", 4_100_000: "4.1 MB", 7e15: "7000.0 TB"} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
}

// summarySource answers a fixed summary; it lists and gets nothing.
type summarySource struct{ sum record.Summary }

func (s summarySource) Get(context.Context, string) (record.Completion, error) {
	return record.Completion{}, record.ErrNotFound
}

func (s summarySource) List(context.Context, record.ListQuery) ([]record.Completion, string, error) {
	return nil, "", nil
}

func (s summarySource) Summary(context.Context) (record.Summary, error) { return s.sum, nil }

// TestHandler_Streams: the page, its streams fragment and state.json show
// each stream against its limits, a stream at 80% or more highlighted with
// a warning, one without a limit with "-".
func TestHandler_Streams(t *testing.T) {
	c := testConsole()
	src := summarySource{record.Summary{Streams: []record.StreamFill{
		record.NewStreamFill("L1A", 64172851, 1200, 64<<20, -1),
		record.NewStreamFill("R1", 2048, 4, -1, -1),
		record.NewStreamFill("RQ", 10<<20, 3, 1<<30, 0),
	}}}
	c.cfg.Source = func() record.StatusSource { return src }
	c.Sample(t0ctx)
	h := c.Handler()
	for _, tc := range []struct {
		path string
		want []string
		not  []string
	}{
		{"/console/", []string{`<div id="streams">`, `data-stream="L1A"`}, nil},
		{"/console/streams", []string{
			`<tr class="stream filling" data-stream="L1A" data-fill="95">`, "61.2 MiB", "64 MiB", `class="num fill bad"`, "95%",
			`<tr class="stream" data-stream="R1" data-fill="">`, "2 KiB",
			`<tr class="stream" data-stream="RQ" data-fill="0">`, "10 MiB", "1 GiB",
			"Stream L1A is 95% full: at its limit it refuses new messages.",
		}, []string{"Stream RQ is", "Stream R1 is"}},
		{"/console/state.json", []string{`"streams":[{"stream":"L1A","bytes":64172851,"messages":1200,"max_bytes":67108864,"max_messages":-1,"fill":0.95`}, nil},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.path, rec.Code, body)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q:\n%s", tc.path, w, body)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(body, w) {
				t.Errorf("%s holds %q:\n%s", tc.path, w, body)
			}
		}
	}
}
