package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafline/leafline/topology"
)

// Request headers the nats sink sets on every request.
const (
	NATSHeaderEventID      = "Leafline-Event-Id"
	NATSHeaderSubject      = "Leafline-Subject"
	NATSHeaderOriginStream = "Leafline-Origin-Stream"
)

// Reply headers a service may answer with.
const (
	NATSHeaderResult = "Leafline-Result" // ok, retry or fail
	NATSHeaderError  = "Leafline-Error"  // the reason of a retry or fail
	// The headers a nats.go micro service sets with Request.Error.
	natsServiceErrorCode = "Nats-Service-Error-Code"
	natsServiceError     = "Nats-Service-Error"
)

// NATSMaxReply is the largest reply body the nats sink reads. A larger
// reply is a temporary failure: it is not a Leafline answer.
const NATSMaxReply = 1 << 20

// Defaults for a zero NATSSinkConfig field (the same as topology's).
const (
	natsDefaultTimeout        = 5 * time.Second
	natsDefaultMaxConcurrency = 64
)

// natsPermanentCodes are the micro error codes that say the request itself
// is wrong, so that sending it again cannot help.
var natsPermanentCodes = map[string]bool{"400": true, "404": true, "413": true, "422": true}

// NATSSink sends each event as a NATS request to a service on the box's own
// NATS server (sink.type "nats"). The service is any NATS client of that
// server, in any language; a NATS micro service fits.
//
// # Request
//
// One core NATS request per event to Subject, with at most MaxConcurrency
// requests in flight for the sink as a whole, each bounded by Timeout:
//
//   - body: the event's payload bytes, unchanged (JSON or not);
//   - headers: Leafline-Event-Id (the event_id), Leafline-Subject (the
//     subject the event was published on) and Leafline-Origin-Stream (the
//     stream at L1 it was first stored in; may be empty).
//
// No Nats-Msg-Id header is set: were the service's subject captured by a
// JetStream stream, the stream's duplicate window would silently swallow a
// redelivery. The service absorbs a redelivery itself, by
// Leafline-Event-Id: it may receive the same event_id more than once and
// must answer ok without doing the work twice.
//
// # Reply
//
// The first rule that applies decides the event's outcome:
//
//  1. A reply body larger than NATSMaxReply (1 MiB): temporary failure
//     (oversize), nothing of the reply is read.
//  2. Header Leafline-Result: "ok" is success, "fail" a permanent refusal
//     (the event is dead-lettered), "retry" a temporary failure; the
//     optional header Leafline-Error gives the reason. Any other value is
//     a temporary failure (ErrMalformed).
//  3. The micro error headers Nats-Service-Error-Code and
//     Nats-Service-Error (what a micro service's Request.Error sends):
//     codes 400, 404, 413 and 422 are a permanent refusal; any other code,
//     or none, is a temporary failure.
//  4. The body: empty is success (so a micro service's Respond(nil), or
//     any bare reply, acknowledges the event); a JSON Result object
//     ({"event_id":"…","result":"ok"|"retry"|"fail","error":"…"}) maps as
//     Result.Err does, except that an event_id other than the request's is
//     a temporary ErrMalformed (its event_id may be left out); anything
//     else is a temporary ErrMalformed.
//
// Reply header names are matched without regard to case.
//
// A request that gets no reply is a temporary failure wrapping
// ErrUnavailable: no responders (no service is subscribed), no reply
// within Timeout, a closed, draining or reconnecting connection, or the
// caller's ctx done. A payload larger than the server's max_payload is a
// temporary failure too (it cannot be sent, but the target did not refuse
// it). After Close, and for the requests Close cuts short, every event is a
// temporary failure wrapping net.ErrClosed.
//
// An event_id that appears twice in one batch is sent once, and both
// positions get its result.
//
// NOTE: a timeout does not tell what the service did: it may finish the
// work after the sink gave up. The redelivery that follows is why the
// service must be idempotent by event_id.
type NATSSink struct {
	nc      *nats.Conn
	subject string
	timeout time.Duration
	log     *slog.Logger
	// slots bounds the requests in flight across concurrent Writes.
	slots chan struct{}

	// gate refuses Writes after Close, which waits for those in flight.
	gate *writeGate
}

// errNATSClosed fails the events of a Write on a closed sink, and those
// that Close cut short: temporary, the runner redelivers them.
var errNATSClosed = fmt.Errorf("nats sink is closed: %w", net.ErrClosed)

// NewNATS returns a sink that sends events to cfg.Subject over nc, a
// connection to the box's own NATS server. It does not check that a
// service is listening: events wait (as temporary failures) until one is.
// A zero Timeout means 5s and a zero MaxConcurrency 64. Close does not
// close nc.
func NewNATS(nc *nats.Conn, cfg topology.NATSSinkConfig, log *slog.Logger) (*NATSSink, error) {
	if nc == nil {
		return nil, errors.New("sink.nats: no NATS connection")
	}
	if err := checkRequestSubject(cfg.Subject); err != nil {
		return nil, fmt.Errorf("sink.nats.subject: %w", err)
	}
	timeout := time.Duration(cfg.Timeout)
	switch {
	case timeout < 0:
		return nil, fmt.Errorf("sink.nats.timeout: must not be negative, got %v", timeout)
	case timeout == 0:
		timeout = natsDefaultTimeout
	}
	maxc := cfg.MaxConcurrency
	switch {
	case maxc < 0:
		return nil, fmt.Errorf("sink.nats.max_concurrency: must not be negative, got %d", maxc)
	case maxc == 0:
		maxc = natsDefaultMaxConcurrency
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &NATSSink{
		nc:      nc,
		subject: cfg.Subject,
		timeout: timeout,
		log:     log.With("sink", "nats", "service_subject", cfg.Subject),
		slots:   make(chan struct{}, maxc),
		gate:    newWriteGate(),
	}, nil
}

// checkRequestSubject refuses a subject a request cannot be sent to.
func checkRequestSubject(s string) error {
	if s == "" {
		return errors.New("required: the service's request subject")
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return fmt.Errorf("%q contains white space", s)
	}
	for _, tok := range strings.Split(s, ".") {
		switch tok {
		case "":
			return fmt.Errorf("%q has an empty token", s)
		case "*", ">":
			return fmt.Errorf("%q has a wildcard: a request needs a literal subject", s)
		}
	}
	return nil
}

// Write sends every distinct event of evs as one request and maps each
// reply as the NATSSink doc says. It returns once every request has its
// outcome, or promptly once ctx is done (the unanswered events then fail
// temporarily).
func (s *NATSSink) Write(ctx context.Context, evs []Event) []error {
	errs := make([]error, len(evs))
	if len(evs) == 0 {
		return errs
	}
	// Close cancels the requests in flight.
	ctx, leave, ok := s.gate.admit(ctx)
	if !ok {
		return fill(errs, errNATSClosed)
	}
	defer leave()

	b := distinctIDs(evs)
	res := make([]error, len(b.ids))
	var wg sync.WaitGroup
	for j, i := range b.first {
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			res[j] = s.notSent(ctx)
			continue
		}
		wg.Go(func() {
			defer func() { <-s.slots }()
			res[j] = s.request(ctx, evs[i])
		})
	}
	wg.Wait()
	errs = b.spread(res)

	unavailable := 0
	for _, err := range errs {
		if errors.Is(err, ErrUnavailable) {
			unavailable++
		}
	}
	if unavailable > 0 && !s.gate.isShut() && ctx.Err() == nil {
		s.log.Warn("nats sink: the service did not answer", "events", unavailable, "batch", len(evs))
	}
	return errs
}

// notSent is the error of an event whose request was never sent because
// ctx was done first.
func (s *NATSSink) notSent(ctx context.Context) error {
	if s.gate.isShut() {
		return errNATSClosed
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, context.Cause(ctx))
}

// request sends ev and maps its reply.
func (s *NATSSink) request(ctx context.Context, ev Event) error {
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	msg := &nats.Msg{
		Subject: s.subject,
		Data:    ev.Data,
		Header: nats.Header{
			NATSHeaderEventID:      {ev.ID},
			NATSHeaderSubject:      {ev.Subject},
			NATSHeaderOriginStream: {ev.OriginStream},
		},
	}
	reply, err := s.nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			s.log.Warn("nats sink: event larger than the server's max_payload", "event_id", ev.ID, "bytes", len(ev.Data))
		}
		err = s.requestError(ctx, err)
		s.log.Debug("nats sink: no answer", "event_id", ev.ID, "outcome", outcome(err))
		return err
	}
	err = natsReplyErr(ev.ID, reply)
	s.log.Debug("nats sink: answer", "event_id", ev.ID, "outcome", outcome(err))
	return err
}

// requestError maps an error of the request itself (no reply was read).
// ctx is the batch's context, without the per-request timeout.
func (s *NATSSink) requestError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil && s.gate.isShut():
		return errNATSClosed
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", ErrUnavailable, context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%w: no reply on %s within %v", ErrUnavailable, s.subject, s.timeout)
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: no service is subscribed to %s: %w", ErrUnavailable, s.subject, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("nats sink: request to %s: %w", s.subject, err)
	default:
		return fmt.Errorf("%w: request to %s: %w", ErrUnavailable, s.subject, err)
	}
}

// natsReplyErr maps the reply to a request for eventID, by the rules of
// the NATSSink doc.
func natsReplyErr(eventID string, reply *nats.Msg) error {
	if n := len(reply.Data); n > NATSMaxReply {
		return fmt.Errorf("%w: reply of %d bytes is larger than %d (oversize)", ErrMalformed, n, NATSMaxReply)
	}
	if res, ok := replyHeader(reply.Header, NATSHeaderResult); ok {
		reason, _ := replyHeader(reply.Header, NATSHeaderError)
		return Result{Result: strings.TrimSpace(res), Error: reason}.Err()
	}
	code, hasCode := replyHeader(reply.Header, natsServiceErrorCode)
	desc, hasDesc := replyHeader(reply.Header, natsServiceError)
	if hasCode || hasDesc {
		if desc == "" {
			desc = "no description"
		}
		err := fmt.Errorf("service error %s: %s", code, desc)
		if natsPermanentCodes[strings.TrimSpace(code)] {
			return Permanent(err)
		}
		return err
	}
	if len(reply.Data) == 0 {
		return nil
	}
	var r Result
	if err := json.Unmarshal(reply.Data, &r); err != nil {
		return fmt.Errorf("%w: reply body is neither empty nor a JSON result", ErrMalformed)
	}
	if r.EventID != "" && r.EventID != eventID {
		return fmt.Errorf("%w: reply is for event_id %q", ErrMalformed, r.EventID)
	}
	return r.Err()
}

// replyHeader returns the first value of header name, matching its name
// without regard to case, and whether it is present.
func replyHeader(h nats.Header, name string) (string, bool) {
	if v, ok := h[name]; ok && len(v) > 0 {
		return v[0], true
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0], true
		}
	}
	return "", false
}

// Close cancels the requests in flight, waits for the Writes that sent
// them to return, and makes later Writes fail temporarily. It does not
// close the NATS connection, which the box owns. Close is idempotent.
func (s *NATSSink) Close() error {
	s.gate.closeAndWait()
	return nil
}
