package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem is one thing wrong with the input.
type Problem struct {
	// Path locates the value: "sites[2].leafnode", `events["a b"]` (see
	// Field and Elem). Empty means the input as a whole.
	Path string
	// Msg says what is wrong.
	Msg string
}

// StringType is the syntax of a Go type that JSON holds as a string of
// its own, such as a duration ("30s").
type StringType struct {
	// Want names such a string in a message: "must be <Want>, got a number".
	Want string
	// Check reports why s is not a valid value, or nil. Its error is the
	// problem's message.
	Check func(s string) error
}

// Options adjust Decode. The zero value is a plain strict decode.
type Options struct {
	// StringTypes are the types whose JSON value is a string that their
	// StringType checks; nil means none.
	StringTypes map[reflect.Type]StringType
}

// Decode decodes the JSON object in data into v, a pointer to a struct,
// and returns every problem it finds, each with its path. v is decoded
// only when there is none; otherwise it is unchanged.
//
// A token-walking pass checks the input against v's type first, so that
// every unknown key, duplicate key, null, wrong type and out-of-range number
// is reported, not just the first; encoding/json then does the decoding.
func Decode(data []byte, v any, o Options) []Problem {
	w := &walker{data: data, stringTypes: o.StringTypes}
	if len(bytes.TrimSpace(data)) == 0 {
		w.add("", "empty input: expected a JSON object")
		return w.problems
	}
	if !utf8.Valid(data) {
		w.add("", "invalid UTF-8 at %s", position(data, invalidUTF8Offset(data)))
		return w.problems
	}
	w.dec = json.NewDecoder(bytes.NewReader(data))
	w.dec.UseNumber()
	if w.value(reflect.TypeOf(v).Elem(), "") {
		w.trailing()
	}
	if len(w.problems) > 0 {
		return w.problems
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// The walker accepts only what encoding/json accepts; this is a
		// backstop, not an expected path.
		w.add("", "%v", err)
	}
	return w.problems
}

// walker walks a JSON token stream alongside a Go type.
type walker struct {
	dec         *json.Decoder
	data        []byte
	stringTypes map[reflect.Type]StringType
	problems    []Problem
}

// add records a problem at path; format and args build the message.
func (w *walker) add(path, format string, args ...any) {
	w.problems = append(w.problems, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// token reads the next token. On a syntax error it records the problem at
// path and returns false: nothing after it can be trusted.
func (w *walker) token(path string) (json.Token, bool) {
	tok, err := w.dec.Token()
	if err == nil {
		return tok, true
	}
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		w.add(path, "syntax error at %s: %s", position(w.data, int(se.Offset)), se.Error())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		w.add(path, "unexpected end of input")
	default:
		w.add(path, "%v", err)
	}
	return nil, false
}

// value reads one value of type t at path. It returns false only on a
// syntax error.
func (w *walker) value(t reflect.Type, path string) bool {
	tok, ok := w.token(path)
	if !ok {
		return false
	}
	return w.check(t, path, tok)
}

// check checks the value that starts with tok against t.
func (w *walker) check(t reflect.Type, path string, tok json.Token) bool {
	if tok == nil {
		w.add(path, "null is not allowed; omit the key to get the default")
		return true
	}
	if st, ok := w.stringTypes[t]; ok {
		return w.text(path, st, tok)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return w.check(t.Elem(), path, tok)
	case reflect.Struct:
		if tok != json.Delim('{') {
			return w.mismatch(path, "a JSON object", tok)
		}
		return w.object(t, path)
	case reflect.Map:
		if tok != json.Delim('{') || t.Key().Kind() != reflect.String {
			return w.mismatch(path, "a JSON object", tok)
		}
		return w.object(t, path)
	case reflect.Slice, reflect.Array:
		if tok != json.Delim('[') {
			return w.mismatch(path, "a JSON array", tok)
		}
		return w.array(t.Elem(), path)
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return w.mismatch(path, "a string", tok)
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return w.mismatch(path, "true or false", tok)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return w.integer(t, path, tok)
	case reflect.Float32, reflect.Float64:
		return w.float(t, path, tok)
	default:
		return w.skip(path, tok)
	}
	return true
}

// object walks the members of an object of type t (a struct or a map).
func (w *walker) object(t reflect.Type, path string) bool {
	seen := map[string]bool{}
	for {
		tok, ok := w.token(path)
		if !ok {
			return false
		}
		if tok == json.Delim('}') {
			return true
		}
		key, _ := tok.(string)
		kp := Field(path, key)
		if seen[key] {
			w.add(kp, "duplicate key")
		}
		seen[key] = true
		vt, known := keyType(t, key)
		if !known {
			w.add(kp, "unknown key%s", hint(t, key))
			if !w.skipValue(kp) {
				return false
			}
			continue
		}
		if !w.value(vt, kp) {
			return false
		}
	}
}

// hint suggests the key a mistyped key of an object of type t probably meant.
func hint(t reflect.Type, key string) string {
	if t.Kind() != reflect.Struct {
		return ""
	}
	if name := foldField(t, key); name != "" {
		return " (keys are case-sensitive: did you mean \"" + name + "\"?)"
	}
	return ""
}

// keyType resolves a key of an object of type t (a struct or a map).
func keyType(t reflect.Type, key string) (reflect.Type, bool) {
	if t.Kind() == reflect.Map {
		return t.Elem(), true
	}
	return structField(t, key)
}

// array walks an array's elements.
func (w *walker) array(elem reflect.Type, path string) bool {
	for i := 0; ; i++ {
		tok, ok := w.token(Elem(path, i))
		if !ok {
			return false
		}
		if tok == json.Delim(']') {
			return true
		}
		if !w.check(elem, Elem(path, i), tok) {
			return false
		}
	}
}

// integer checks that tok is an integer that fits t.
func (w *walker) integer(t reflect.Type, path string, tok json.Token) bool {
	n, ok := tok.(json.Number)
	if !ok {
		return w.mismatch(path, "an integer", tok)
	}
	s := n.String()
	var err error
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		_, err = strconv.ParseUint(s, 10, t.Bits())
	} else {
		_, err = strconv.ParseInt(s, 10, t.Bits())
	}
	switch {
	case errors.Is(err, strconv.ErrRange):
		w.add(path, "%s is out of range for a %d-bit integer", short(s), t.Bits())
	case err != nil:
		w.add(path, "must be an integer, got %s", short(s))
	}
	return true
}

// float checks that tok is a number that fits t.
func (w *walker) float(t reflect.Type, path string, tok json.Token) bool {
	n, ok := tok.(json.Number)
	if !ok {
		return w.mismatch(path, "a number", tok)
	}
	if _, err := strconv.ParseFloat(n.String(), t.Bits()); err != nil {
		w.add(path, "%s is out of range for a %d-bit float", short(n.String()), t.Bits())
	}
	return true
}

// text checks that tok is a string that st accepts.
func (w *walker) text(path string, st StringType, tok json.Token) bool {
	s, ok := tok.(string)
	if !ok {
		return w.mismatch(path, st.Want, tok)
	}
	if err := st.Check(s); err != nil {
		w.add(path, "%v", err)
	}
	return true
}

// mismatch records that the value at path is not of the wanted kind and
// skips it.
func (w *walker) mismatch(path, want string, tok json.Token) bool {
	w.add(path, "must be %s, got %s", want, describe(tok))
	return w.skip(path, tok)
}

// skipValue reads and discards one value.
func (w *walker) skipValue(path string) bool {
	tok, ok := w.token(path)
	if !ok {
		return false
	}
	return w.skip(path, tok)
}

// skip discards the rest of the value that starts with tok, without
// recursion, however deep it nests.
func (w *walker) skip(path string, tok json.Token) bool {
	depth := 0
	for {
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return true
		}
		var ok bool
		if tok, ok = w.token(path); !ok {
			return false
		}
	}
}

// trailing records any data after the top-level value.
func (w *walker) trailing() {
	off := int(w.dec.InputOffset())
	if _, err := w.dec.Token(); errors.Is(err, io.EOF) {
		return
	}
	for off < len(w.data) && strings.IndexByte(" \t\r\n", w.data[off]) >= 0 {
		off++
	}
	w.add("", "unexpected data after the top-level JSON object at %s", position(w.data, off))
}

// structField returns the type of t's field whose JSON name is exactly key.
func structField(t reflect.Type, key string) (reflect.Type, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name, ok := jsonName(f); ok && name == key {
			return f.Type, true
		}
	}
	return nil, false
}

// foldField returns t's JSON key that equals key but for case, if any.
func foldField(t reflect.Type, key string) string {
	for i := 0; i < t.NumField(); i++ {
		if name, ok := jsonName(t.Field(i)); ok && strings.EqualFold(name, key) {
			return name
		}
	}
	return ""
}

// jsonName is the key encoding/json uses for f, and whether f is decoded.
func jsonName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return "", false
	}
	if name == "" {
		name = f.Name
	}
	return name, true
}

// describe names the kind of value tok starts.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "a string"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return "the number " + short(v.String())
	case nil:
		return "null"
	}
	return "an unexpected value"
}

// short shortens a number literal for a message.
func short(s string) string {
	if len(s) > 32 {
		return s[:29] + "..."
	}
	return s
}

// position renders a byte offset as "line L, column C" (1-based, columns in bytes).
func position(data []byte, off int) string {
	off = min(max(off, 0), len(data))
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	col := off - bytes.LastIndexByte(data[:off], '\n')
	return "line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col)
}

// invalidUTF8Offset returns the offset of the first invalid UTF-8 byte.
func invalidUTF8Offset(data []byte) int {
	for off := 0; off < len(data); {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n == 1 {
			return off
		}
		off += n
	}
	return len(data)
}
