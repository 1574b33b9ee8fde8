package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology/subjects"
)

// Defaults of MicroConfig.
const (
	DefaultMicroName    = "leafline-status"
	DefaultMicroVersion = "1.0.0"
	DefaultStatusPrefix = "leafline.status"
	// maxMicroRequest bounds a list request body.
	maxMicroRequest = 4096
)

// MicroConfig configures StartMicro. Zero values mean the defaults.
type MicroConfig struct {
	// Name of the service as `nats micro ls` shows it; zero = DefaultMicroName.
	Name string
	// Version (semver); zero = DefaultMicroVersion.
	Version string
	// Prefix of the endpoint subjects; zero = DefaultStatusPrefix. The
	// endpoints are "<Prefix>.get", "<Prefix>.list" and "<Prefix>.summary".
	Prefix string
	// QueueGroup shared by the instances; zero = the micro default ("q"),
	// so several instances share the requests.
	QueueGroup string
	// Timeout bounds the work of one request; zero = HTTPTimeout.
	Timeout time.Duration
}

// StartMicro starts the NATS micro service that answers status queries
// from src (typically the *Service) on nc, and returns it; call Stop on
// it when done. Endpoints (request → response):
//
//	<prefix>.get      body: the event_id bytes    → Completion JSON
//	<prefix>.list     body: ListQuery JSON        → ListPage JSON
//	<prefix>.summary  body: empty or "{}"         → Summary JSON
//
// Errors are micro errors (headers Nats-Service-Error-Code and
// Nats-Service-Error) with a JSON body {"error": "..."}: 400 for a
// malformed id, query or oversize body, 404 for an unknown event, 503 when
// the store is not ready or unreachable, 500 for a corrupt record.
func StartMicro(nc *nats.Conn, src record.StatusSource, cfg MicroConfig) (micro.Service, error) {
	setDefault(&cfg.Name, DefaultMicroName)
	setDefault(&cfg.Version, DefaultMicroVersion)
	setDefault(&cfg.Prefix, DefaultStatusPrefix)
	setDefault(&cfg.Timeout, HTTPTimeout)
	if err := subjects.ValidateLiteral(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: Prefix: %w", record.ErrInvalidConfig, err)
	}
	m := &microServer{src: src, timeout: cfg.Timeout}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        cfg.Name,
		Version:     cfg.Version,
		Description: "leafline L1 completion status: what happened to event X?",
		QueueGroup:  cfg.QueueGroup,
	})
	if err != nil {
		return nil, fmt.Errorf("receipts: micro: %w", err)
	}
	g := svc.AddGroup(cfg.Prefix)
	for _, e := range []struct {
		name, desc string
		h          func(context.Context, micro.Request)
	}{
		{"get", "body: event_id; answer: the completion record", m.get},
		{"list", `body: {"status":"pending|overdue|dead_lettered|expired|conflict","site":"","limit":100,"after":""}`, m.list},
		{"summary", "answer: counts per status and per site, how full each of L1's streams is", m.summary},
		{"unidentified", `body: {"limit":100,"after":""}; answer: origin messages without a usable event_id`, m.unidentified},
	} {
		if err := g.AddEndpoint(e.name, m.wrap(e.h), micro.WithEndpointMetadata(map[string]string{"description": e.desc})); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("receipts: micro endpoint %s: %w", e.name, err)
		}
	}
	return svc, nil
}

type microServer struct {
	src     record.StatusSource
	timeout time.Duration
}

// wrap bounds h by the request timeout. Handlers answer before returning
// (micro reads the outcome for its stats when the handler returns), so each
// endpoint serves one request at a time per instance; every query is bounded
// (see Store.List and Store.Summary), and the endpoints have separate
// subscriptions, so a summary never delays a get.
func (m *microServer) wrap(h func(context.Context, micro.Request)) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
		defer cancel()
		h(ctx, req)
	})
}

func (m *microServer) get(ctx context.Context, req micro.Request) {
	body := req.Data()
	if len(body) > receipt.MaxEventIDLen {
		microError(req, http.StatusBadRequest, fmt.Sprintf("event_id: %d bytes, limit %d", len(body), receipt.MaxEventIDLen))
		return
	}
	id := string(body)
	if err := receipt.ValidateEventID(id); err != nil {
		microError(req, http.StatusBadRequest, "event_id: "+errText(err))
		return
	}
	c, err := m.src.Get(ctx, id)
	m.respond(req, c, err)
}

func (m *microServer) list(ctx context.Context, req micro.Request) {
	q, err := decodeListRequest(req.Data())
	if err != nil {
		microError(req, http.StatusBadRequest, errText(err))
		return
	}
	items, next, err := m.src.List(ctx, q)
	if items == nil {
		items = []record.Completion{}
	}
	m.respond(req, ListPage{Items: items, Next: next}, err)
}

// decodeListRequest parses a list request body strictly (unknown fields,
// trailing data and oversize bodies are errors) and validates it.
func decodeListRequest(b []byte) (record.ListQuery, error) {
	if len(b) > maxMicroRequest {
		return record.ListQuery{}, fmt.Errorf("%w: request body %d bytes, limit %d", record.ErrBadQuery, len(b), maxMicroRequest)
	}
	var q record.ListQuery
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		return record.ListQuery{}, fmt.Errorf("%w: request body: %v", record.ErrBadQuery, err)
	}
	if dec.More() {
		return record.ListQuery{}, fmt.Errorf("%w: request body: trailing data", record.ErrBadQuery)
	}
	if err := q.Validate(); err != nil {
		return record.ListQuery{}, err
	}
	return q, nil
}

func (m *microServer) summary(ctx context.Context, req micro.Request) {
	if b := bytes.TrimSpace(req.Data()); len(b) > 0 && string(b) != "{}" {
		microError(req, http.StatusBadRequest, "summary takes no parameters")
		return
	}
	sum, err := m.src.Summary(ctx)
	m.respond(req, sum, err)
}

func (m *microServer) respond(req micro.Request, v any, err error) {
	if err != nil {
		code := statusCode(err)
		msg := errText(err)
		if code == http.StatusNotFound {
			msg = "unknown event_id"
		}
		microError(req, code, msg)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		microError(req, http.StatusInternalServerError, "encode: "+err.Error())
		return
	}
	_ = req.Respond(b)
}

func microError(req micro.Request, code int, msg string) {
	body, _ := json.Marshal(map[string]string{"error": msg})
	_ = req.Error(strconv.Itoa(code), msg, body)
}

// StatusError is an error answer of the status service, as StatusClient
// returns it. It matches ErrNotFound (404), ErrBadQuery (400) and
// ErrNotReady (503) with errors.Is.
type StatusError struct {
	Code    int
	Message string
}

// Error returns the code and the service's message.
func (e *StatusError) Error() string {
	return fmt.Sprintf("receipts: status service: %d %s", e.Code, e.Message)
}

// Is matches the sentinel that corresponds to the code.
func (e *StatusError) Is(target error) bool {
	switch e.Code {
	case http.StatusNotFound:
		return target == record.ErrNotFound
	case http.StatusBadRequest:
		return target == record.ErrBadQuery
	case http.StatusServiceUnavailable:
		return target == record.ErrNotReady
	}
	return false
}

// StatusClient queries a status micro service over NATS request/reply. It
// implements StatusSource.
type StatusClient struct {
	nc     *nats.Conn
	prefix string
}

// NewStatusClient returns a client for the service at prefix (zero =
// DefaultStatusPrefix).
func NewStatusClient(nc *nats.Conn, prefix string) *StatusClient {
	if prefix == "" {
		prefix = DefaultStatusPrefix
	}
	return &StatusClient{nc: nc, prefix: prefix}
}

// Get asks for the completion record of eventID.
func (c *StatusClient) Get(ctx context.Context, eventID string) (record.Completion, error) {
	if err := receipt.ValidateEventID(eventID); err != nil {
		return record.Completion{}, err
	}
	var out record.Completion
	err := c.call(ctx, "get", []byte(eventID), &out)
	return out, err
}

// List asks for a page of events.
func (c *StatusClient) List(ctx context.Context, q record.ListQuery) ([]record.Completion, string, error) {
	if err := q.Validate(); err != nil {
		return nil, "", err
	}
	body, err := json.Marshal(q)
	if err != nil {
		return nil, "", err
	}
	var page ListPage
	if err := c.call(ctx, "list", body, &page); err != nil {
		return nil, "", err
	}
	return page.Items, page.Next, nil
}

// Summary asks for the summary.
func (c *StatusClient) Summary(ctx context.Context) (record.Summary, error) {
	var out record.Summary
	err := c.call(ctx, "summary", nil, &out)
	return out, err
}

func (c *StatusClient) call(ctx context.Context, endpoint string, body []byte, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, HTTPTimeout+time.Second)
		defer cancel()
	}
	msg, err := c.nc.RequestWithContext(ctx, c.prefix+"."+endpoint, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w: no status service answers on %s.%s", record.ErrNotReady, c.prefix, endpoint)
	}
	if err != nil {
		return fmt.Errorf("receipts: status service %s: %w", endpoint, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return &StatusError{Code: n, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return fmt.Errorf("receipts: status service %s: bad answer: %w", endpoint, err)
	}
	return nil
}
