package eventid

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// ErrNoEventID means a message carries no usable event_id. It is permanent.
var ErrNoEventID = fmt.Errorf("%w: no usable event_id", sink.ErrPermanent)

// Extractor returns the configured way to read a message's event_id:
// from the JSON field event_id.json_field when set, else from the header
// event_id.header. A missing, non-string or too long id is an error
// wrapping ErrNoEventID.
func Extractor(c topology.EventIDConfig) func(jetstream.Msg) (string, error) {
	check := func(id string) (string, error) {
		if len(id) > c.MaxLength {
			return "", fmt.Errorf("%w: %d bytes > %d", ErrNoEventID, len(id), c.MaxLength)
		}
		return id, nil
	}
	if c.JSONField != "" {
		field := c.JSONField
		return func(m jetstream.Msg) (string, error) {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(m.Data(), &obj); err != nil {
				return "", fmt.Errorf("%w: payload is not a JSON object", ErrNoEventID)
			}
			raw, ok := obj[field]
			if !ok {
				return "", fmt.Errorf("%w: JSON field %q missing", ErrNoEventID, field)
			}
			var id string
			if err := json.Unmarshal(raw, &id); err != nil {
				return "", fmt.Errorf("%w: JSON field %q is not a string", ErrNoEventID, field)
			}
			return check(id)
		}
	}
	header := c.Header
	return func(m jetstream.Msg) (string, error) {
		id := m.Headers().Get(header)
		if id == "" {
			return "", fmt.Errorf("%w: header %q missing", ErrNoEventID, header)
		}
		return check(id)
	}
}
