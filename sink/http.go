package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/leafline/leafline/topology"
)

// Request headers the http sink sets. A headers_file or headers_env may not
// set them (nor any other Leafline-* header).
const (
	HTTPHeaderBatchSize      = "Leafline-Batch-Size"
	HTTPHeaderEventID        = "Leafline-Event-Id"
	HTTPHeaderIdempotencyKey = "Idempotency-Key"
)

// HTTPMaxAnswer is the largest 2xx answer body the http sink reads. A
// larger answer is a temporary failure (oversize).
const HTTPMaxAnswer = 4 << 20

// HTTPMaxRetryAfter caps the delay a Retry-After header may ask for, so
// that a wrong header cannot park events for days.
const HTTPMaxRetryAfter = time.Hour

const (
	// Defaults for a zero HTTPSinkConfig field (the same as topology's).
	httpDefaultTimeout        = 10 * time.Second
	httpDefaultMaxConcurrency = 4
	// httpMaxErrorBody is how much of a non-2xx body is read for its
	// reason; the rest is discarded.
	httpMaxErrorBody = 64 << 10
	// httpMaxDrain is how much of an unread body is discarded so that
	// the connection can be reused; past it the connection is closed.
	httpMaxDrain = 256 << 10
	// httpMaxReason bounds a text from the target kept in an error.
	httpMaxReason = 200
)

// httpReserved are the request headers the sink or net/http own.
var httpReserved = map[string]bool{
	"Connection": true, "Content-Length": true, "Content-Type": true,
	"Host": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"User-Agent": true, HTTPHeaderIdempotencyKey: true,
}

var errHTTPClosed = fmt.Errorf("http sink: %w", net.ErrClosed)

// errHTTPConnLost marks a request whose connection the target reset or
// closed before its answer: a crash of the target, for the crash tracker.
var errHTTPConnLost = errors.New("the target closed the connection before its answer")

// HTTPSink POSTs events to a URL: a service of the user's, usually on the
// same box (sink.type "http").
//
// # Request
//
// Every request is a POST to URL with the headers Content-Type:
// application/json and User-Agent: leafline, plus those of headers_file and
// headers_env. At most MaxConcurrency requests are in flight for the sink
// as a whole, each bounded by Timeout (sending it and reading its answer).
// Redirects are not followed; HTTP_PROXY, HTTPS_PROXY and NO_PROXY apply
// as in any Go program (a loopback target is never proxied). An event is
// encoded as
//
//	{"event_id":"…","subject":"…","origin_stream":"…","data":<payload>}
//
// with "data_base64":"<standard base64>" in place of data when the payload
// is not valid JSON (see EncodeEvent).
//
// Mode "batch" (the default) sends one request per Write (a fetched
// batch), with the body {"events":[<event>,…]} and the header
// Leafline-Batch-Size: <number of events in the body>.
//
// Mode "single" sends one request per event, with the body <event> and the
// headers Idempotency-Key and Leafline-Event-Id, both the event_id.
//
// An event_id that appears twice in one Write is sent once, and both
// positions get its result. An event with no event_id is refused
// (permanently) without being sent: no target could absorb its
// redelivery. The target absorbs a redelivery by event_id: it may receive
// the same event_id again (in a later request, or after a timeout) and
// must answer ok without doing the work twice.
//
// # Answer
//
// The status code decides first:
//
//   - 2xx with an empty body (or only white space): every event of the
//     request is done.
//   - 2xx with a body, mode batch: {"results":[{"event_id":"…","result":
//     "ok"|"retry"|"fail","error":"…"},…]}. ok is done, fail a permanent
//     refusal (the event is dead-lettered), retry a temporary failure; any
//     other result is a temporary failure. An event of the request with no
//     entry is a temporary failure; an entry for an event_id not in the
//     request is ignored; two entries that disagree for one event_id are a
//     temporary failure for that event.
//   - 2xx with a body, mode single: one {"event_id":"…","result":…,
//     "error":"…"} object, mapped the same way; its event_id may be left
//     out, and one other than the request's is a temporary failure.
//   - 2xx whose body is not that JSON, or larger than HTTPMaxAnswer
//     (4 MiB): a temporary failure (ErrMalformed) for every event of the
//     request: nothing tells what the target did.
//   - 400, 404, 422: a permanent refusal of every event of the request.
//   - 413: in mode single, a permanent refusal. In mode batch the request
//     is split in two halves, each sent at once (and split again on 413),
//     so that only an event too large on its own is refused.
//   - 408, 429, 5xx and any other code (1xx, 3xx, 401, 403, 409, …): a
//     temporary failure naming the code, so that a misconfigured target or
//     credential never dead-letters events. Retry-After (seconds or an
//     HTTP date, at most HTTPMaxRetryAfter: 1h) is passed on as the delay
//     before the retry. 502, 503 and 504 wrap ErrUnavailable.
//
// A non-2xx body may be a JSON object with an "error" string, which is kept
// in the event's error. Texts from the target are cut to 200 bytes; header
// values are never logged.
//
// A request that gets no answer is a temporary failure wrapping
// ErrUnavailable: a refused connection, a TLS error, no answer within
// Timeout, or the caller's ctx done.
//
// # Poison events
//
// A target that resets or closes the connection of a request before its
// answer has crashed with the request's events in flight: they fail
// temporarily, wrapping ErrUnavailable. In mode batch the events of such a
// request are sent again at once in the same Write, each alone, so that
// the others are done and the crash points at one event. An event in
// flight at PoisonAfter such crashes in a row (3 unless configured), each
// counted only while the target answers other requests, is a poison event:
// its next delivery fails permanently with ErrWorkerCrash, without being
// sent, and the runner dead-letters it (see package sink). In mode single
// the client's transport may itself send a request again on a new
// connection when a reused one was reset (the request carries an
// Idempotency-Key): that is one crash.
//
// NOTE: a timeout does not tell what the target did: it may finish the
// work after the sink gave up. The redelivery that follows is why the
// target must be idempotent by event_id.
type HTTPSink struct {
	url     string
	single  bool
	timeout time.Duration
	header  http.Header // from headers_file and headers_env
	client  *http.Client
	log     *slog.Logger
	// slots bounds the requests in flight across concurrent Writes.
	slots chan struct{}
	// crashes finds the poison events.
	crashes *crashTracker

	// gate refuses Writes after Close, which waits for those in flight.
	gate *writeGate
}

// NewHTTP returns a sink that POSTs events as cfg says. It reads the TLS
// files, headers_file and the headers_env variables now, and reports every
// problem with its config path; it does not contact the target, so a box
// starts while its target is down. A zero Mode means "batch", a zero
// Timeout 10s, a zero MaxConcurrency 4 and a zero PoisonAfter 3.
func NewHTTP(cfg topology.HTTPSinkConfig, log *slog.Logger) (*HTTPSink, error) {
	return newHTTP(cfg, log, Counters{})
}

func newHTTP(cfg topology.HTTPSinkConfig, log *slog.Logger, count Counters) (*HTTPSink, error) {
	var errs []error
	if u, err := url.Parse(cfg.URL); err != nil {
		errs = append(errs, fmt.Errorf("sink.http.url: not a URL: %w", errors.Unwrap(err)))
	} else if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		errs = append(errs, errors.New("sink.http.url: must be an http or https URL with a host"))
	}
	single := false
	switch cfg.Mode {
	case "", "batch":
	case "single":
		single = true
	default:
		errs = append(errs, fmt.Errorf("sink.http.mode: must be batch or single, got %q", cfg.Mode))
	}
	timeout := cfg.Timeout.D()
	switch {
	case timeout < 0:
		errs = append(errs, fmt.Errorf("sink.http.timeout: must not be negative, got %v", timeout))
	case timeout == 0:
		timeout = httpDefaultTimeout
	}
	maxc := cfg.MaxConcurrency
	switch {
	case maxc < 0:
		errs = append(errs, fmt.Errorf("sink.http.max_concurrency: must not be negative, got %d", maxc))
	case maxc == 0:
		maxc = httpDefaultMaxConcurrency
	}
	after, err := poisonAfter("sink.http.poison_after", cfg.PoisonAfter)
	if err != nil {
		errs = append(errs, err)
	}
	tlsConf, err := httpTLSConfig(cfg)
	if err != nil {
		errs = append(errs, err)
	}
	header, err := httpHeaders(cfg)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	// Timeout bounds each request as a whole (its ctx), so the transport
	// needs no timeouts of its own beyond the dial's.
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConf,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        max(100, maxc),
		MaxIdleConnsPerHost: maxc,
		IdleConnTimeout:     90 * time.Second,
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &HTTPSink{
		url:     cfg.URL,
		single:  single,
		timeout: timeout,
		header:  header,
		client: &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		log:     log.With("sink", "http"),
		slots:   make(chan struct{}, maxc),
		crashes: newCrashTracker(after, count.TargetCrash),
		gate:    newWriteGate(),
	}, nil
}

// httpItem is one distinct event of a Write, encoded.
type httpItem struct {
	id   string
	body []byte
	at   int // index in the Write's distinct events
}

// Write sends the distinct events of evs as the HTTPSink doc says and maps
// each answer. It returns once every request has its outcome, or promptly
// once ctx is done (the unanswered events then fail temporarily).
func (s *HTTPSink) Write(ctx context.Context, evs []Event) []error {
	errs := make([]error, len(evs))
	if len(evs) == 0 {
		return errs
	}
	// Close cancels the requests in flight.
	ctx, leave, ok := s.gate.admit(ctx)
	if !ok {
		return fill(errs, errHTTPClosed)
	}
	defer leave()

	b := distinctIDs(evs)
	distinct := make([]error, len(b.ids)) // the results of the distinct events
	var items []httpItem
	for j, i := range b.first {
		ev := evs[i]
		if ev.ID == "" {
			// The target could not absorb its redelivery.
			distinct[j] = Permanent(errors.New("http sink: event has no event_id"))
			continue
		}
		body, err := EncodeEvent(ev)
		if err != nil {
			// The same event can never be encoded: retrying cannot help.
			distinct[j] = Permanent(fmt.Errorf("http sink: %w", err))
			continue
		}
		items = append(items, httpItem{id: ev.ID, body: body, at: j})
	}

	if id, body, ok := s.crashes.probe(b.ids); ok {
		// Its answer, whatever it is, confirms the crash; a reset drops it.
		it := httpItem{id: id, body: body}
		if s.single {
			s.postOne(ctx, it)
		} else {
			s.postBatch(ctx, []httpItem{it})
		}
	}
	var results []error
	if s.single {
		results = make([]error, len(items))
		var wg sync.WaitGroup
		for k, it := range items {
			if s.poisoned(it.id, results, k) {
				continue
			}
			wg.Go(func() { results[k] = s.postOne(ctx, it) })
		}
		wg.Wait()
	} else if len(items) > 0 {
		results = s.sendBatches(ctx, items)
	}
	for k, it := range items {
		distinct[it.at] = results[k]
	}
	for k := len(items) - 1; k >= 0; k-- {
		if results[k] == nil {
			s.crashes.keep(items[k].id, items[k].body)
			break
		}
	}

	s.logOutcomes(ctx, b.ids, distinct)
	return b.spread(distinct)
}

// logOutcomes logs each event's outcome, and one warning for the events
// that failed temporarily. A target's own text is never logged.
func (s *HTTPSink) logOutcomes(ctx context.Context, ids []string, errs []error) {
	var temporary []error
	for j, id := range ids {
		switch err := errs[j]; {
		case err == nil:
			s.log.Debug("http sink: delivered", "event_id", id)
		case IsPermanent(err):
			s.log.Warn("http sink: target refused event", "event_id", id, "outcome", httpOutcome(err))
		default:
			temporary = append(temporary, err)
			s.log.Debug("http sink: delivery failed, to be retried", "event_id", id, "outcome", httpOutcome(err))
		}
	}
	if len(temporary) == 0 || ctx.Err() != nil {
		return
	}
	attrs := []any{"events", len(temporary), "distinct", len(ids), "outcome", httpOutcome(temporary[0])}
	if _, status := errors.AsType[*httpStatusError](temporary[0]); !status && errors.Is(temporary[0], ErrUnavailable) {
		attrs = append(attrs, "err", temporary[0]) // the transport's, not the target's, text
	}
	s.log.Warn("http sink: events failed temporarily", attrs...)
}

// sendBatches sends items in mode batch, in requests as the crash tracker
// plans them: the events it does not suspect in one request, each suspect
// alone (unless it is a poison event, which is not sent). The events of a
// request whose connection was lost are planned and sent again once.
func (s *HTTPSink) sendBatches(ctx context.Context, items []httpItem) []error {
	res := make([]error, len(items))
	ids := make([]string, len(items))
	left := make([]int, len(items))
	for k, it := range items {
		ids[k], left[k] = it.id, k
	}
	for round := 0; round < 2 && len(left) > 0 && ctx.Err() == nil; round++ {
		first, group, last := s.crashes.plan(ids, left)
		sends := [][]int{group}
		for _, k := range append(first, last...) {
			if !s.poisoned(ids[k], res, k) {
				sends = append(sends, []int{k})
			}
		}
		var wg sync.WaitGroup
		for _, ks := range sends {
			if len(ks) == 0 {
				continue
			}
			wg.Go(func() {
				sub := make([]httpItem, len(ks))
				for j, k := range ks {
					sub[j] = items[k]
				}
				for j, err := range s.postBatch(ctx, sub) {
					res[ks[j]] = err
				}
			})
		}
		wg.Wait()
		left = nil
		for _, ks := range sends {
			for _, k := range ks {
				if errors.Is(res[k], errHTTPConnLost) {
					left = append(left, k)
				}
			}
		}
	}
	return res
}

// poisoned sets res[k] to ErrWorkerCrash if id is a poison event, and
// reports whether it is.
func (s *HTTPSink) poisoned(id string, res []error, k int) bool {
	bad, crashes := s.crashes.poisoned(id)
	if !bad {
		return false
	}
	s.log.Warn("http sink: poison event: in flight at connection resets in a row; it fails for good",
		"event_id", id, "crashes", crashes)
	res[k] = fmt.Errorf("http sink: %w: the target reset the connection %d times in a row with this event in flight", ErrWorkerCrash, crashes)
	return true
}

// postOne sends one event (mode single) and maps its answer.
func (s *HTTPSink) postOne(ctx context.Context, it httpItem) error {
	a, err := s.post(ctx, []string{it.id}, it.body, func(h http.Header) {
		h.Set(HTTPHeaderIdempotencyKey, it.id)
		h.Set(HTTPHeaderEventID, it.id)
	})
	if err != nil {
		return err
	}
	if !a.ok() {
		return a.statusErr()
	}
	if a.empty() {
		return nil
	}
	var r Result
	if err := json.Unmarshal(a.body, &r); err != nil {
		return fmt.Errorf("http sink: %w: a 2xx body that is not a JSON result (status %d)", ErrMalformed, a.code)
	}
	if r.EventID != "" && r.EventID != it.id {
		return fmt.Errorf("http sink: %w: answer is for event_id %q", ErrMalformed, httpCut(r.EventID))
	}
	return httpResultErr(r)
}

// postBatch sends items as one request (mode batch) and maps its answer;
// a 413 splits it.
func (s *HTTPSink) postBatch(ctx context.Context, items []httpItem) []error {
	size := len(`{"events":[]}`) + len(items)
	for _, it := range items {
		size += len(it.body)
	}
	body := make([]byte, 0, size)
	body = append(body, `{"events":[`...)
	for k, it := range items {
		if k > 0 {
			body = append(body, ',')
		}
		body = append(body, it.body...)
	}
	body = append(body, "]}"...)

	errs := make([]error, len(items))
	ids := make([]string, len(items))
	for k, it := range items {
		ids[k] = it.id
	}
	a, err := s.post(ctx, ids, body, func(h http.Header) {
		h.Set(HTTPHeaderBatchSize, strconv.Itoa(len(items)))
	})
	switch {
	case err != nil:
		return fill(errs, err)
	case a.code == http.StatusRequestEntityTooLarge && len(items) > 1:
		s.log.Debug("http sink: target refused the batch as too large; splitting it", "events", len(items))
		half := len(items) / 2
		var left []error
		var wg sync.WaitGroup
		wg.Go(func() { left = s.postBatch(ctx, items[:half]) })
		right := s.postBatch(ctx, items[half:])
		wg.Wait()
		return append(left, right...)
	case !a.ok():
		return fill(errs, a.statusErr())
	case a.empty():
		return errs
	}

	var ans struct {
		Results []Result `json:"results"`
	}
	if err := json.Unmarshal(a.body, &ans); err != nil {
		return fill(errs, fmt.Errorf("http sink: %w: a 2xx body that is not {\"results\":[…]} (status %d)", ErrMalformed, a.code))
	}
	index := make(map[string]int, len(items))
	for k, it := range items {
		index[it.id] = k
	}
	got := make([]string, len(items)) // the result value each event got
	for _, r := range ans.Results {
		k, ok := index[r.EventID]
		switch {
		case !ok:
			s.log.Debug("http sink: answer has a result for an event not in the request", "event_id", httpCut(r.EventID))
		case got[k] == "":
			got[k] = r.Result
			errs[k] = httpResultErr(r)
		case got[k] != r.Result:
			errs[k] = fmt.Errorf("http sink: %w: results %q and %q for one event", ErrMalformed, httpCut(got[k]), httpCut(r.Result))
		}
	}
	for k := range items {
		if got[k] == "" && errs[k] == nil {
			errs[k] = errors.New("http sink: the answer has no result for this event")
		}
	}
	return errs
}

// httpResultErr maps r with its reason cut to size.
func httpResultErr(r Result) error {
	r.Error = httpCut(r.Error)
	if err := r.Err(); err != nil {
		return fmt.Errorf("http sink: %w", err)
	}
	return nil
}

// httpAnswer is what the target answered to one request.
type httpAnswer struct {
	code   int
	status string // the status line's code and text
	header http.Header
	body   []byte
}

func (a httpAnswer) ok() bool    { return a.code >= 200 && a.code < 300 }
func (a httpAnswer) empty() bool { return len(bytes.TrimSpace(a.body)) == 0 }

// statusErr maps a non-2xx answer (but a batch's 413, which splits it) to
// the error of every event of its request.
func (a httpAnswer) statusErr() error {
	se := &httpStatusError{code: a.code, reason: httpCut(a.status)}
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(a.body, &body) == nil && body.Error != "" {
		se.reason += ": " + httpCut(body.Error)
	}
	switch a.code {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity:
		return Permanent(fmt.Errorf("http sink: target refused the request: %w", se))
	case http.StatusRequestEntityTooLarge:
		return Permanent(fmt.Errorf("http sink: target refused the event as too large: %w", se))
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return RetryAfter(fmt.Errorf("http sink: %w: target answered %w", ErrUnavailable, se), httpRetryAfter(a.header, time.Now()))
	default:
		return RetryAfter(fmt.Errorf("http sink: target answered %w", se), httpRetryAfter(a.header, time.Now()))
	}
}

// httpStatusError is a non-2xx answer: its code, and its status line and
// error text cut to size.
type httpStatusError struct {
	code   int
	reason string
}

func (e *httpStatusError) Error() string { return e.reason }

// httpOutcome names err's class for a log line, without its text (which
// may carry what the target wrote).
func httpOutcome(err error) string {
	if se, ok := errors.AsType[*httpStatusError](err); ok {
		return "status " + strconv.Itoa(se.code)
	}
	return outcome(err)
}

// post sends one request, with the events ids, and reads its answer: at
// most HTTPMaxAnswer bytes of a 2xx body, httpMaxErrorBody of another. An
// error is a temporary failure: no answer (ErrUnavailable), or an oversize
// one (ErrMalformed). It tells the crash tracker how the request ended.
func (s *HTTPSink) post(ctx context.Context, ids []string, body []byte, setHeader func(http.Header)) (httpAnswer, error) {
	a, err := s.request(ctx, body, setHeader)
	switch {
	case err == nil:
		s.crashes.answer(ids...)
	case errors.Is(err, errHTTPConnLost):
		s.crashes.crashed(ids)
	case ctx.Err() == nil && errors.Is(err, ErrUnavailable):
		s.crashes.lapse()
	}
	return a, err
}

// request sends one request and reads its answer (see post).
func (s *HTTPSink) request(ctx context.Context, body []byte, setHeader func(http.Header)) (httpAnswer, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return httpAnswer{}, s.requestError(ctx, ctx.Err())
	}
	defer func() { <-s.slots }()

	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return httpAnswer{}, fmt.Errorf("http sink: %w", err)
	}
	req.Header = s.header.Clone()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "leafline")
	setHeader(req.Header)
	resp, err := s.client.Do(req)
	if err != nil {
		return httpAnswer{}, s.requestError(ctx, err)
	}
	defer func() {
		io.CopyN(io.Discard, resp.Body, httpMaxDrain)
		resp.Body.Close()
	}()
	a := httpAnswer{code: resp.StatusCode, status: resp.Status, header: resp.Header}
	limit := int64(httpMaxErrorBody)
	if a.ok() {
		limit = HTTPMaxAnswer
	}
	a.body, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	switch {
	case err != nil:
		return httpAnswer{}, s.requestError(ctx, err)
	case a.ok() && int64(len(a.body)) > limit:
		return httpAnswer{}, fmt.Errorf("http sink: %w: answer is larger than %d bytes (oversize)", ErrMalformed, limit)
	case int64(len(a.body)) > limit:
		a.body = a.body[:limit]
	}
	return a, nil
}

// requestError maps an error of sending a request or reading its answer.
// ctx is the Write's context, without the per-request timeout.
func (s *HTTPSink) requestError(ctx context.Context, err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err // without the URL, whose query may carry a token
	}
	switch {
	case ctx.Err() != nil && s.gate.isShut():
		return errHTTPClosed
	case ctx.Err() != nil:
		return fmt.Errorf("http sink: %w: %w", ErrUnavailable, context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("http sink: %w: no answer within %v: %w", ErrUnavailable, s.timeout, err)
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("http sink: %w: %w: %w", ErrUnavailable, errHTTPConnLost, err)
	default:
		return fmt.Errorf("http sink: %w: %w", ErrUnavailable, err)
	}
}

// httpRetryAfter returns the delay a Retry-After header asks for (delay
// seconds or an HTTP date), at most HTTPMaxRetryAfter, or zero.
func httpRetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n >= uint64(HTTPMaxRetryAfter/time.Second) {
			return HTTPMaxRetryAfter
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), HTTPMaxRetryAfter)
}

// httpCut returns s as valid UTF-8, cut to about httpMaxReason bytes.
func httpCut(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= httpMaxReason {
		return s
	}
	n := httpMaxReason
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Close cancels the requests in flight, waits for the Writes that sent
// them to return, closes the idle connections, and makes later Writes fail
// temporarily. Close is idempotent.
func (s *HTTPSink) Close() error {
	s.gate.closeAndWait()
	s.client.CloseIdleConnections()
	return nil
}
