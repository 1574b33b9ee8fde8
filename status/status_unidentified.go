package status

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/leafline/leafline/completion/record"
	"github.com/nats-io/nats.go/micro"
)

func (m *microServer) unidentified(ctx context.Context, req micro.Request) {
	q := unidentifiedRequest{Limit: record.DefaultListLimit}
	if len(req.Data()) > maxMicroRequest {
		microError(req, http.StatusBadRequest, "request too large")
		return
	}
	if b := strings.TrimSpace(string(req.Data())); b != "" {
		if err := json.Unmarshal([]byte(b), &q); err != nil {
			microError(req, http.StatusBadRequest, "body: not a JSON object {\"limit\":N,\"after\":\"CURSOR\"}")
			return
		}
	}
	src, ok := m.src.(UnidentifiedSource)
	if !ok {
		microError(req, http.StatusNotFound, "this status service does not list unidentified origin messages")
		return
	}
	page, err := src.Unidentified(ctx, q.After, q.Limit)
	m.respond(req, page, err)
}

func (h *httpHandler) unidentified(w http.ResponseWriter, r *http.Request) {
	src, ok := h.src.(UnidentifiedSource)
	if !ok {
		writeError(w, http.StatusNotFound, "this status service does not list unidentified origin messages")
		return
	}
	limit := record.DefaultListLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "limit: not a number")
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), HTTPTimeout)
	defer cancel()
	page, err := src.Unidentified(ctx, r.URL.Query().Get("after"), limit)
	if err != nil {
		writeError(w, statusCode(err), errText(err))
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// Unidentified asks for a page of unidentified origin messages.
func (c *StatusClient) Unidentified(ctx context.Context, after string, limit int) (record.UnidentifiedPage, error) {
	body, _ := json.Marshal(unidentifiedRequest{Limit: limit, After: after})
	var out record.UnidentifiedPage
	err := c.call(ctx, "unidentified", body, &out)
	return out, err
}

// UnidentifiedSource lists unidentified origin messages (the *Service).
type UnidentifiedSource interface {
	Unidentified(ctx context.Context, after string, limit int) (record.UnidentifiedPage, error)
}

// unidentifiedRequest is the body of the status service's "unidentified"
// endpoint and the query of GET /v1/unidentified.
type unidentifiedRequest struct {
	Limit int    `json:"limit"`
	After string `json:"after"`
}
