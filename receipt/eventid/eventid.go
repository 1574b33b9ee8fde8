package eventid

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoEventID means a message carries no usable event_id.
var ErrNoEventID = errors.New("no usable event_id")

// Extractor returns the way the configuration (its event_id section) reads
// a message's event_id: from the payload's JSON field jsonField when it is
// set, else from the header. A missing, non-string or id longer than
// maxLength bytes is an error wrapping ErrNoEventID.
func Extractor(jsonField, header string, maxLength int) func(jetstream.Msg) (string, error) {
	check := func(id string) (string, error) {
		if len(id) > maxLength {
			return "", fmt.Errorf("%w: %d bytes > %d", ErrNoEventID, len(id), maxLength)
		}
		return id, nil
	}
	if jsonField != "" {
		field := jsonField
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
	return func(m jetstream.Msg) (string, error) {
		id := m.Headers().Get(header)
		if id == "" {
			return "", fmt.Errorf("%w: header %q missing", ErrNoEventID, header)
		}
		return check(id)
	}
}
