package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"
)

//go:embed assets
var assets embed.FS

var tmpl = template.Must(template.New("").Funcs(template.FuncMap{
	"ago":       ago,
	"stamp":     stamp,
	"sparkline": sparkline,
	"size":      size,
	"binsize":   record.BinarySize,
	"limits":    limits,
}).ParseFS(assets, "assets/*.html"))

// pageSize is the number of events per page of a list.
const pageSize = 20

// Handler serves the console under /console/: mount it with
// mux.Handle("/console/", c.Handler()).
//
//	GET /console/               the page
//	GET /console/sites          the sites table (HTML fragment)
//	GET /console/streams        L1's streams against their limits (fragment)
//	GET /console/events?status=overdue|dead_lettered|expired[&after=CURSOR]
//	                            a page of events, newest first (fragment)
//	GET /console/event?id=ID    one event's full record (fragment)
//	GET /console/state.json     the sites and the summary (streams included) as JSON
//	GET /console/assets/…       the script and style sheet
func (c *Console) Handler() http.Handler {
	c.handlerOnce.Do(func() { c.handler = c.newHandler() })
	return c.handler
}

func (c *Console) newHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/console/{$}", c.page)
	mux.HandleFunc("/console/sites", c.sites)
	mux.HandleFunc("/console/streams", c.streams)
	mux.HandleFunc("/console/events", c.events)
	mux.HandleFunc("/console/event", c.event)
	mux.HandleFunc("/console/state.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c.current())
	})
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("/console/assets/", http.StripPrefix("/console/assets/", http.FileServerFS(static)))
	return readOnly(mux)
}

// readOnly allows GET and HEAD only and sets the headers every answer has.
func readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the console is read-only: use GET", http.StatusMethodNotAllowed)
			return
		}
		if len(r.URL.RawQuery) > 4096 {
			http.Error(w, "query too long (limit 4096 bytes)", http.StatusRequestURITooLong)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		next.ServeHTTP(w, r)
	})
}

type pageData struct {
	Snap      Snapshot
	RefreshMS int64
	Overdue   eventsData
	Dead      eventsData
	Expired   eventsData
}

func (c *Console) page(w http.ResponseWriter, r *http.Request) {
	d := pageData{Snap: c.current(), RefreshMS: c.cfg.Refresh.Milliseconds()}
	d.Overdue = c.list(r.Context(), record.ListOverdue, "")
	d.Dead = c.list(r.Context(), record.ListDeadLettered, "")
	d.Expired = c.list(r.Context(), record.ListExpired, "")
	render(w, "page.html", d)
}

func (c *Console) sites(w http.ResponseWriter, r *http.Request) {
	render(w, "sites", c.current())
}

func (c *Console) streams(w http.ResponseWriter, r *http.Request) {
	render(w, "streams", c.current())
}

type eventsData struct {
	Status string
	Items  []record.Completion
	Next   string
	Error  string
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := record.ListStatus(q.Get("status"))
	if st != record.ListOverdue && st != record.ListDeadLettered && st != record.ListExpired {
		http.Error(w, "status: must be overdue, dead_lettered or expired", http.StatusBadRequest)
		return
	}
	render(w, "events", c.list(r.Context(), st, q.Get("after")))
}

func (c *Console) list(ctx context.Context, st record.ListStatus, after string) eventsData {
	d := eventsData{Status: string(st)}
	src := c.cfg.Source()
	if src == nil {
		d.Error = "the completion service is not running"
		return d
	}
	ctx, cancel := context.WithTimeout(ctx, status.HTTPTimeout)
	defer cancel()
	items, next, err := src.List(ctx, record.ListQuery{Status: st, Limit: pageSize, After: after})
	if err != nil {
		d.Error = err.Error()
		return d
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].UpdatedAt.After(items[j].UpdatedAt) })
	d.Items, d.Next = items, next
	return d
}

type eventData struct {
	ID     string
	Found  *record.Completion
	Record string
	Error  string
}

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	d := eventData{ID: id}
	if err := receipt.ValidateEventID(id); err != nil {
		d.Error = "event_id: " + err.Error()
		render(w, "event", d)
		return
	}
	src := c.cfg.Source()
	if src == nil {
		d.Error = "the completion service is not running"
		render(w, "event", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), status.HTTPTimeout)
	defer cancel()
	comp, err := src.Get(ctx, id)
	switch {
	case errors.Is(err, record.ErrNotFound):
		d.Error = "no event with this id at L1"
	case err != nil:
		d.Error = err.Error()
	default:
		d.Found = &comp
		b, _ := json.MarshalIndent(comp, "", "  ")
		d.Record = string(b)
	}
	render(w, "event", d)
}

func render(w http.ResponseWriter, name string, data any) {
	var b strings.Builder
	if err := tmpl.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "console: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

// ago says how long before now t was, coarsely; "never" for zero.
func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// size writes a byte count in decimal units: 0 B, 950 B, 12.3 kB, 4.1 MB.
func size(n int64) string {
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"kB", "MB", "GB", "TB"} {
		f /= 1000
		if f < 1000 || u == "TB" {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return ""
}

// limits writes a stream's limits: "64 MiB", "1000 messages", both, or
// "-" for none.
func limits(f record.StreamFill) string {
	var out []string
	if f.MaxBytes > 0 {
		out = append(out, record.BinarySize(uint64(f.MaxBytes)))
	}
	if f.MaxMsgs > 0 {
		out = append(out, fmt.Sprintf("%d messages", f.MaxMsgs))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// sparkline returns the points of an SVG polyline 100 wide and 20 high
// through vs, scaled to their maximum.
func sparkline(vs []int64) string {
	if len(vs) == 0 {
		return ""
	}
	if len(vs) == 1 {
		vs = []int64{vs[0], vs[0]}
	}
	top := int64(1)
	for _, v := range vs {
		top = max(top, v)
	}
	var b strings.Builder
	for i, v := range vs {
		x := float64(i) * 100 / float64(len(vs)-1)
		y := 19 - float64(v)*18/float64(top)
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String())
}
