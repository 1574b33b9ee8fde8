// Package jsmsg adapts messages read from a stream to code written for
// consumed messages.
package jsmsg

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stored presents a message read from a stream (a direct or API get) as a
// jetstream.Msg to code that reads only its subject, headers and payload,
// such as an event_id extractor. Any other method panics: the caller
// recovers, or gives it only to such code.
func Stored(raw *jetstream.RawStreamMsg) jetstream.Msg { return stored{raw: raw} }

type stored struct {
	jetstream.Msg
	raw *jetstream.RawStreamMsg
}

func (m stored) Data() []byte         { return m.raw.Data }
func (m stored) Headers() nats.Header { return m.raw.Header }
func (m stored) Subject() string      { return m.raw.Subject }
