package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxEncodedSize is the largest encoding Decode accepts. Every receipt that
// passes Validate encodes well below it, even when event_id and reason consist
// entirely of characters JSON must escape (6 bytes each).
const MaxEncodedSize = 16 << 10

// Encode validates r and returns its JSON encoding (one object, no trailing
// newline, HTML characters not escaped).
func (r Receipt) Encode() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("receipt: encode: %w", err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > MaxEncodedSize { // unreachable for a valid receipt; kept as a guard
		return nil, fmt.Errorf("%w: encoding is %d bytes, limit %d", ErrInvalid, len(b), MaxEncodedSize)
	}
	return b, nil
}

// field bits for the strict decoder.
const (
	fVersion = 1 << iota
	fReceiptID
	fEventID
	fOriginStream
	fProcessor
	fSite
	fStatus
	fProcessedAt
	fReason
	fPayloadSHA256

	fRequired = fVersion | fReceiptID | fEventID | fOriginStream | fProcessor | fSite | fStatus | fProcessedAt
)

var fieldNames = []struct {
	bit  int
	name string
}{
	{fVersion, "v"}, {fReceiptID, "receipt_id"}, {fEventID, "event_id"},
	{fOriginStream, "origin_stream"}, {fProcessor, "processor"}, {fSite, "site"},
	{fStatus, "status"}, {fProcessedAt, "processed_at"}, {fReason, "reason"},
	{fPayloadSHA256, "payload_sha256"},
}

func fieldBit(name string) int {
	for _, f := range fieldNames {
		if f.name == name {
			return f.bit
		}
	}
	return 0
}

// Decode parses b strictly and validates the result. Every failure wraps
// ErrMalformed (and so ErrQuarantine) with a reason that never quotes field
// values. Rejected: more than MaxEncodedSize bytes; invalid UTF-8; anything but
// exactly one JSON object; unknown keys (matched case-sensitively); duplicate
// keys; null or a value of the wrong type; "v" not an integer literal;
// processed_at not RFC 3339; missing required keys (all but "reason");
// trailing data; and any Validate failure (then ErrInvalid matches too).
//
// ProcessedAt is returned in UTC.
//
// NOTE: encoding/json turns an escaped lone surrogate ("\ud800") into U+FFFD;
// such a receipt decodes with U+FFFD in its strings.
func Decode(b []byte) (Receipt, error) {
	if len(b) > MaxEncodedSize {
		return Receipt{}, malformed("%d bytes, limit %d", len(b), MaxEncodedSize)
	}
	if !utf8.Valid(b) {
		return Receipt{}, malformed("not valid UTF-8")
	}
	if r, ok := decodePlain(b); ok {
		if err := r.Validate(); err != nil {
			return Receipt{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return r, nil
	}
	return decodeTokens(b)
}

// decodeTokens is Decode's general path: any JSON, with an exact reason
// for every rejection.
func decodeTokens(b []byte) (Receipt, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()

	tok, err := dec.Token()
	if err != nil {
		return Receipt{}, malformed("invalid JSON: %v", jsonErr(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Receipt{}, malformed("not a JSON object")
	}

	var r Receipt
	seen := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Receipt{}, malformed("invalid JSON: %v", jsonErr(err))
		}
		key, ok := tok.(string)
		if !ok { // cannot happen: the decoder only yields strings in key position
			return Receipt{}, malformed("invalid JSON: object key is not a string")
		}
		bit := fieldBit(key)
		if bit == 0 {
			return Receipt{}, malformed("unknown field %s", ShortQuote(key))
		}
		if seen&bit != 0 {
			return Receipt{}, malformed("duplicate field %q", key)
		}
		seen |= bit

		val, err := dec.Token()
		if err != nil {
			return Receipt{}, malformed("invalid JSON: %v", jsonErr(err))
		}
		if err := r.setField(bit, key, val); err != nil {
			return Receipt{}, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return Receipt{}, malformed("invalid JSON: %v", jsonErr(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return Receipt{}, malformed("trailing data after the JSON object")
	}
	if missing := fRequired &^ seen; missing != 0 {
		var names []string
		for _, f := range fieldNames {
			if missing&f.bit != 0 {
				names = append(names, f.name)
			}
		}
		return Receipt{}, malformed("missing required field(s): %s", strings.Join(names, ", "))
	}
	if err := r.Validate(); err != nil {
		return Receipt{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return r, nil
}

// setField stores one decoded scalar token into r.
func (r *Receipt) setField(bit int, key string, val json.Token) error {
	if bit == fVersion {
		n, ok := val.(json.Number)
		if !ok {
			return malformed("field %q: want an integer, got %s", key, tokenKind(val))
		}
		v, err := strconv.ParseInt(string(n), 10, 32)
		if err != nil {
			return malformed("field %q: not an integer in range", key)
		}
		r.Version = int(v)
		return nil
	}
	s, ok := val.(string)
	if !ok {
		return malformed("field %q: want a string, got %s", key, tokenKind(val))
	}
	switch bit {
	case fReceiptID:
		r.ReceiptID = s
	case fEventID:
		r.EventID = s
	case fOriginStream:
		r.OriginStream = s
	case fProcessor:
		r.Processor = s
	case fSite:
		r.Site = s
	case fStatus:
		r.Status = Status(s)
	case fReason:
		r.Reason = s
	case fPayloadSHA256:
		r.PayloadSHA256 = s
	case fProcessedAt:
		// UnmarshalText is the strict RFC 3339 parser that time.Time's JSON
		// decoding uses, so Encode's output always parses back.
		if err := r.ProcessedAt.UnmarshalText([]byte(s)); err != nil {
			return malformed("field %q: not an RFC 3339 timestamp", key)
		}
		r.ProcessedAt = r.ProcessedAt.UTC()
	}
	return nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func tokenKind(t json.Token) string {
	switch v := t.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "an array"
	}
	return fmt.Sprintf("%T", t)
}

// jsonErr strips encoding/json's offset detail to a short message; syntax
// errors name at most one offending character, never a value.
func jsonErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (offset %d)", se.Error(), se.Offset)
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

// ShortQuote quotes s for an error message, cut to 64 bytes.
func ShortQuote(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// decodePlain decodes the common shape of a receipt in one pass: one
// object whose keys are known, each once, every required one present,
// "v" a plain non-negative integer and every other value a string without
// escapes or control characters. ok is false for anything else (including
// every input decodeTokens rejects), which then takes decodeTokens; where
// ok is true the result is decodeTokens' (FuzzDecode_PlainMatchesTokens).
func decodePlain(b []byte) (r Receipt, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return Receipt{}, false
	}
	i++
	seen := 0
	for first := true; ; first = false {
		i = skipSpace(b, i)
		if i >= len(b) {
			return Receipt{}, false
		}
		if b[i] == '}' {
			if first && seen == 0 {
				return Receipt{}, false // {}: missing fields, left to the general path
			}
			i++
			break
		}
		if !first {
			if b[i] != ',' {
				return Receipt{}, false
			}
			i = skipSpace(b, i+1)
		}
		key, j, ok := plainString(b, i)
		if !ok {
			return Receipt{}, false
		}
		bit := fieldBit(key)
		if bit == 0 || seen&bit != 0 {
			return Receipt{}, false
		}
		seen |= bit
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return Receipt{}, false
		}
		i = skipSpace(b, i+1)
		if bit == fVersion {
			j = i
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			if j == i || (b[i] == '0' && j > i+1) || (j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E')) {
				return Receipt{}, false
			}
			v, err := strconv.ParseInt(string(b[i:j]), 10, 32)
			if err != nil {
				return Receipt{}, false
			}
			r.Version, i = int(v), j
			continue
		}
		val, j, ok := plainString(b, i)
		if !ok {
			return Receipt{}, false
		}
		if r.setField(bit, "", val) != nil {
			return Receipt{}, false
		}
		i = j
	}
	if skipSpace(b, i) != len(b) || fRequired&^seen != 0 {
		return Receipt{}, false
	}
	return r, true
}

// plainString reads a JSON string at b[i] that has no escapes and no
// control characters, and returns it and the index after it.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
