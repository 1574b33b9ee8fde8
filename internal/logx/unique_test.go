package logx

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/leafline/leafline/internal/logx/logxtest"
)

func TestUnique_LaterValueWinsInFirstPlace(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Unique(slog.NewJSONHandler(&buf, nil)))
	log = log.With("site", "l1", "component", "completion").With("component", "receipts", "stream", "R1")
	log.Warn("origin message", "stream", "L1A", "seq", 7, "component", "tracker")
	log.WithGroup("g").Info("grouped", "stream", "X", "k", 1)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	for _, l := range lines {
		dups, err := logxtest.DuplicateKeys([]byte(l))
		if err != nil || len(dups) > 0 {
			t.Fatalf("line %s: duplicate keys %v (%v)", l, dups, err)
		}
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first["stream"] != "L1A" || first["component"] != "tracker" || first["site"] != "l1" || first["seq"] != float64(7) {
		t.Fatalf("first line %v", first)
	}
	// Order: the logger's keys first, in the order they were first given.
	if i, j := strings.Index(lines[0], `"component"`), strings.Index(lines[0], `"seq"`); i < 0 || i > j {
		t.Fatalf("key order changed: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"stream":"R1"`) || !strings.Contains(lines[1], `"g":{"stream":"X","k":1}`) {
		t.Fatalf("grouped line %s", lines[1])
	}
}

func TestUnique_WrapsOnce(t *testing.T) {
	h := Unique(slog.NewTextHandler(io.Discard, nil))
	if Unique(h) != h {
		t.Fatal("Unique wrapped its own handler again")
	}
}
