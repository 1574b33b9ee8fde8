package status

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
)

// HTTPTimeout bounds the work of one status API request.
const HTTPTimeout = 10 * time.Second

// maxHTTPPath bounds the escaped request path: a MaxEventIDLen-byte id
// escaped entirely (3 bytes per byte) plus the route.
const maxHTTPPath = 3*receipt.MaxEventIDLen + 64

// NewHTTPHandler serves the status API from src (a *Service, *Store or
// *StatusClient):
//
//	GET /v1/events/{event_id}   the completion record; 404 if unknown
//	GET /v1/events?status=pending|overdue|dead_lettered|expired|conflict[&site=S][&limit=N][&after=CURSOR]
//	                            {"items":[...],"next":"CURSOR"} ("next" absent on the last page)
//	GET /v1/summary             Summary
//
// The event_id is the rest of the path, percent-decoded: any valid event_id
// round-trips when the client escapes it with EventPath (url.PathEscape plus
// "%2E" for the ids "." and "..", which path cleaning would otherwise
// remove); an unescaped '/' is taken as part of the id. Errors are JSON {"error": "..."} naming the problem: 400 for a
// malformed id, bad or unknown parameters and oversize input, 404 for an
// unknown id or route, 405 for another method, 503 while the store is not
// ready or unreachable. Responses are never cached.
//
// Mount it on a mux with a prefix pattern, e.g. mux.Handle("/v1/", h).
func NewHTTPHandler(src record.StatusSource) http.Handler {
	h := &httpHandler{src: src}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/events/{event_id...}", h.event)
	mux.HandleFunc("/v1/events", h.list)
	mux.HandleFunc("/v1/summary", h.summary)
	mux.HandleFunc("/v1/unidentified", h.unidentified)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such route; see /v1/events/{event_id}, /v1/events?status=..., /v1/summary, /v1/unidentified")
	})
	return h.guard(mux)
}

// EventPath returns the escaped path of an event under /v1/events/.
func EventPath(eventID string) string {
	switch eventID {
	case ".":
		return "/v1/events/%2E"
	case "..":
		return "/v1/events/%2E%2E"
	}
	return "/v1/events/" + url.PathEscape(eventID)
}

type httpHandler struct{ src record.StatusSource }

// guard checks what applies to every route: method, size, no body.
func (h *httpHandler) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method "+receipt.TruncateUTF8(r.Method, 16)+" not allowed; use GET")
			return
		}
		if len(r.URL.EscapedPath()) > maxHTTPPath {
			writeError(w, http.StatusRequestURITooLong, "path too long: an event_id is at most 512 bytes")
			return
		}
		if len(r.URL.RawQuery) > 4096 {
			writeError(w, http.StatusRequestURITooLong, "query too long (limit 4096 bytes)")
			return
		}
		if r.ContentLength > 0 {
			writeError(w, http.StatusBadRequest, "GET requests take no body")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *httpHandler) event(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, "/v1/events/{event_id} takes no query parameters")
		return
	}
	id := r.PathValue("event_id")
	if err := receipt.ValidateEventID(id); err != nil {
		writeError(w, http.StatusBadRequest, "event_id: "+errText(err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), HTTPTimeout)
	defer cancel()
	c, err := h.src.Get(ctx, id)
	if err != nil {
		writeErr(w, err, map[string]any{"event_id": id})
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// ListPage is the JSON body of a list answer (HTTP and micro).
type ListPage struct {
	Items []record.Completion `json:"items"`
	// Next is the cursor of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

func (h *httpHandler) list(w http.ResponseWriter, r *http.Request) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "malformed query string")
		return
	}
	q, err := record.ParseListQuery(v)
	if err != nil {
		writeErr(w, err, nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), HTTPTimeout)
	defer cancel()
	items, next, err := h.src.List(ctx, q)
	if err != nil {
		writeErr(w, err, nil)
		return
	}
	if items == nil {
		items = []record.Completion{}
	}
	writeJSON(w, http.StatusOK, ListPage{Items: items, Next: next})
}

func (h *httpHandler) summary(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery != "" {
		writeError(w, http.StatusBadRequest, "/v1/summary takes no query parameters")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), HTTPTimeout)
	defer cancel()
	sum, err := h.src.Summary(ctx)
	if err != nil {
		writeErr(w, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, sum)
}

// statusCode maps an error of this package to an HTTP status (and a micro
// error code).
func statusCode(err error) int {
	var se *StatusError
	switch {
	case errors.As(err, &se) && se.Code >= 400 && se.Code <= 599:
		return se.Code
	case errors.Is(err, record.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, record.ErrBadQuery), errors.Is(err, receipt.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, record.ErrCorruptRecord):
		return http.StatusInternalServerError
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusServiceUnavailable // not ready, no index, KV unreachable
}

// errText is the client-facing text of err: the package's own messages
// without the "receipts: " prefixes.
func errText(err error) string {
	return receipt.TruncateUTF8(strings.ReplaceAll(err.Error(), "receipts: ", ""), 2048)
}

func writeErr(w http.ResponseWriter, err error, extra map[string]any) {
	code := statusCode(err)
	msg := errText(err)
	switch code {
	case http.StatusNotFound:
		msg = "unknown event_id"
	case http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusGatewayTimeout:
		msg = "completion store unavailable: " + msg
	}
	body := map[string]any{"error": msg}
	for k, v := range extra {
		body[k] = v
	}
	if code == http.StatusServiceUnavailable {
		// Not ready yet, or what it reads has no leader for now: ask again
		// soon rather than take the silence for an answer.
		w.Header().Set("Retry-After", RetryAfter)
	}
	writeJSON(w, code, body)
}

// RetryAfter is the Retry-After of an answer 503: the seconds after which
// a client may ask again.
const RetryAfter = "5"

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}
