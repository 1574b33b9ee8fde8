package sink

import (
	"encoding/json"
	"errors"
	"fmt"
)

// wireEvent is an event as the http, exec and nats targets receive it.
type wireEvent struct {
	EventID      string          `json:"event_id"`
	Subject      string          `json:"subject"`
	OriginStream string          `json:"origin_stream,omitempty"`
	Data         json.RawMessage `json:"data,omitempty"`
	DataBase64   []byte          `json:"data_base64,omitempty"`
}

// EncodeEvent returns ev as one JSON object:
//
//	{"event_id":"…","subject":"…","origin_stream":"…","data":<payload>}
//
// data is the payload itself when it is valid JSON; otherwise the object
// has "data_base64" (standard base64) in its place, so that any payload
// travels unchanged.
func EncodeEvent(ev Event) ([]byte, error) {
	w := wireEvent{EventID: ev.ID, Subject: ev.Subject, OriginStream: ev.OriginStream}
	if len(ev.Data) > 0 && json.Valid(ev.Data) {
		w.Data = ev.Data
	} else {
		w.DataBase64 = ev.Data
		if w.DataBase64 == nil {
			w.DataBase64 = []byte{}
		}
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	return b, nil
}

// DecodeEvent is EncodeEvent's inverse (for targets written in Go, and
// tests).
func DecodeEvent(b []byte) (Event, error) {
	var w wireEvent
	if err := json.Unmarshal(b, &w); err != nil {
		return Event{}, err
	}
	if w.EventID == "" {
		return Event{}, errors.New("event has no event_id")
	}
	ev := Event{ID: w.EventID, Subject: w.Subject, OriginStream: w.OriginStream, Data: w.DataBase64}
	if w.Data != nil {
		ev.Data = []byte(w.Data)
	}
	return ev, nil
}

// Result values a target answers with.
const (
	ResultOK    = "ok"    // done, durably
	ResultRetry = "retry" // not done; try again later (temporary)
	ResultFail  = "fail"  // refused for good (permanent: dead-lettered)
)

// Result is a target's answer for one event:
//
//	{"event_id":"…","result":"ok"|"retry"|"fail","error":"…"}
type Result struct {
	EventID string `json:"event_id"`
	Result  string `json:"result"`
	Error   string `json:"error,omitempty"`
}

// ErrMalformed means a target's answer could not be understood. It is
// temporary: nothing tells what the target did.
var ErrMalformed = errors.New("malformed answer")

// Err maps the result to the sink contract: ok → nil, fail → Permanent,
// retry → temporary, anything else → temporary ErrMalformed.
func (r Result) Err() error {
	msg := r.Error
	if msg == "" {
		msg = "no reason given"
	}
	switch r.Result {
	case ResultOK:
		return nil
	case ResultFail:
		return Permanent(fmt.Errorf("target refused event: %s", msg))
	case ResultRetry:
		return fmt.Errorf("target asked to retry: %s", msg)
	default:
		return fmt.Errorf("%w: result %q is not ok, retry or fail", ErrMalformed, r.Result)
	}
}
