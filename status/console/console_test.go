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
