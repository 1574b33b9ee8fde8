// Package logxtest checks log lines in tests.
package logxtest

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
)

// DuplicateKeys returns the keys that occur more than once in one object of
// the JSON line (at any depth).
func DuplicateKeys(line []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	var dups []string
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					dups = append(dups, key)
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	err := walk()
	if err == io.EOF {
		err = nil
	}
	return dups, err
}

// Buffer is a log sink that a test reads while loggers write to it from
// other goroutines.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the text-format lines logged with site=site that contain
// every one of subs.
func (l *Buffer) Lines(site string, subs ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if !strings.Contains(line, "site="+site+" ") {
			continue
		}
		ok := true
		for _, sub := range subs {
			ok = ok && strings.Contains(line, sub)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}
