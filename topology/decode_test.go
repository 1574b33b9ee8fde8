package topology

import (
	"strings"
	"testing"

	"github.com/leafline/leafline/topology/subjects"
)

func TestParseTopology_Strict(t *testing.T) {
	tests := []struct {
		name, in, path, msg string
	}{
		{"empty", ``, "", "empty input"},
		{"whitespace", " \n\t", "", "empty input"},
		{"not an object", `[]`, "", "must be a JSON object, got an array"},
		{"trailing value", `{"sites": []} {}`, "", "unexpected data after the top-level JSON object at line 1, column 15"},
		{"trailing garbage", "{\"sites\": []}\nx", "", "unexpected data after the top-level JSON object at line 2, column 1"},
		{"syntax error", "{\n  \"sites\": [}", "sites[0]", "syntax error at line 2, column 13"},
		{"truncated", `{"sites": [`, "sites[0]", "unexpected end of input"},
		{"non-UTF-8", "{\"sites\": \"\xff\"}", "", "invalid UTF-8 at line 1, column 12"},
		{"unknown top-level key", `{"site": []}`, "site", "unknown key"},
		{"unknown nested key", `{"sites": [{"name": "a", "colour": "red"}]}`, "sites[0].colour", "unknown key"},
		{"case-sensitive key", `{"Sites": []}`, "Sites", `did you mean "sites"?`},
		{"odd key", `{"events": {"a b": 1}}`, `events["a b"]`, "unknown key"},
		{"duplicate top-level key", `{"sites": [], "sites": []}`, "sites", "duplicate key"},
		{"duplicate key at depth", `{"sites": [{"name": "a"}, {"name": "b", "leafnode": {"listen": "x:1", "listen": "y:1"}}]}`, "sites[1].leafnode.listen", "duplicate key"},
		{"duplicate unknown key", `{"x": 1, "x": 2}`, "x", "duplicate key"},
		{"string wanted", `{"sites": [{"name": 5}]}`, "sites[0].name", "must be a string, got the number 5"},
		{"array wanted", `{"events": {"subjects": "events.>"}}`, "events.subjects", "must be a JSON array, got a string"},
		{"object wanted", `{"events": []}`, "events", "must be a JSON object, got an array"},
		{"string element wanted", `{"events": {"subjects": [true]}}`, "events.subjects[0]", "must be a string, got true"},
		{"null", `{"events": null}`, "events", "null is not allowed"},
		{"duration number", `{"events": {"duplicate_window": 120}}`, "events.duplicate_window", `must be a duration string such as "30s", got the number 120`},
		{"duration text", `{"events": {"duplicate_window": "2 minutes"}}`, "events.duplicate_window", `"2 minutes" is not a duration`},
		{"duration negative", `{"events": {"duplicate_window": "-1s"}}`, "events.duplicate_window", "negative"},
		{"duration huge", `{"events": {"duplicate_window": "9000h"}}`, "events.duplicate_window", "longer than a year"},
		{"number as string", `{"sites": [{"name": 1e400}]}`, "sites[0].name", "got the number 1e400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTopology([]byte(tt.in), "topology.json")
			wantProblem(t, err, "topology.json", tt.path, tt.msg)
		})
	}
}

func TestParseConfig_Strict(t *testing.T) {
	base := `{"topology": "t.json", "site": "edge1", "data_dir": "/d", `
	tests := []struct {
		name, in, path, msg string
	}{
		{"1e400", `"delivery": {"batch_size": 1e400}}`, "delivery.batch_size", "must be an integer, got 1e400"},
		{"overflow", `"delivery": {"batch_size": 99999999999999999999}}`, "delivery.batch_size", "out of range for a 64-bit integer"},
		{"int64 overflow", `"jetstream": {"max_store_bytes": -9223372036854775809}}`, "jetstream.max_store_bytes", "out of range"},
		{"fraction", `"delivery": {"batch_size": 1.5}}`, "delivery.batch_size", "must be an integer, got 1.5"},
		{"exponent", `"delivery": {"batch_size": 1e2}}`, "delivery.batch_size", "must be an integer, got 1e2"},
		{"quoted number", `"delivery": {"batch_size": "256"}}`, "delivery.batch_size", "must be an integer, got a string"},
		{"bool wanted", `"ops": {"allow_remote": "yes"}}`, "ops.allow_remote", "must be true or false, got a string"},
		{"unknown deep key", `"delivery": {"retry": {"backof_ms": 5}}}`, "delivery.retry.backof_ms", "unknown key"},
		{"duplicate deep key", `"delivery": {"retry": {"mode": "fixed", "mode": "linear"}}}`, "delivery.retry.mode", "duplicate key"},
		{"ignored field", `"Source": "x"}`, "Source", "unknown key"},
		{"topology object", `"Topology": {}}`, "Topology", "unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(base+tt.in), "box.json")
			wantProblem(t, err, "box.json", tt.path, tt.msg)
		})
	}
}

// TestParseConfig_DecodeProblemsAllReported: every decoding problem comes
// back, not just the first.
func TestParseConfig_DecodeProblemsAllReported(t *testing.T) {
	in := `{"site": 1, "data_dir": "/d", "data_dir": "/e", "nats": {"listen": null},
		"delivery": {"batch_size": 1.5, "retry": {"nope": [1, {"a": [{}]}]}}, "log": {"level": true}}`
	_, err := ParseConfig([]byte(in), "box.json")
	got := problemsOf(t, err)
	want := []string{"site", "data_dir", "nats.listen", "delivery.batch_size", "delivery.retry.nope", "log.level"}
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(got), len(want), err)
	}
	for i, p := range got {
		if p.Path != want[i] {
			t.Errorf("problem %d at %q, want %q", i, p.Path, want[i])
		}
	}
}

func TestParseTopology_DeepNesting(t *testing.T) {
	in := `{"x": ` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`
	_, err := ParseTopology([]byte(in), "deep.json")
	wantProblem(t, err, "deep.json", "x", "unknown key")
}

func TestValidationError_Format(t *testing.T) {
	e := &ValidationError{Source: "topology.json", Problems: []Problem{
		{Path: "sites[2].upstream", Msg: `unknown site "hubb"`},
		{Msg: "empty input: expected a JSON object"},
	}}
	want := "topology.json: sites[2].upstream: unknown site \"hubb\"\ntopology.json: empty input: expected a JSON object"
	if e.Error() != want {
		t.Fatalf("got\n%s\nwant\n%s", e.Error(), want)
	}
	if got := (&ValidationError{Problems: e.Problems[:1]}).Error(); got != `sites[2].upstream: unknown site "hubb"` {
		t.Fatalf("no source: got %q", got)
	}
}

func TestSubjects(t *testing.T) {
	tests := []struct {
		a, b             string
		overlap, aWithin bool
	}{
		{"events.>", "events.>", true, true},
		{"events.a", "events.>", true, true},
		{"events.*", "events.>", true, true},
		{"events.>", "events.*", true, false},
		{"events", "events.>", false, false},
		{"events.a.b", "events.*", false, false},
		{"events.*.b", "events.a.*", true, false},
		{"*.a", "events.*", true, false},
		{"orders.>", "events.>", false, false},
		{">", "events.a", true, false},
		{"events.a", ">", true, true},
	}
	for _, tt := range tests {
		if got := subjects.Overlap(tt.a, tt.b); got != tt.overlap {
			t.Errorf("subjects.Overlap(%q, %q) = %v", tt.a, tt.b, got)
		}
		if got := subjects.Overlap(tt.b, tt.a); got != tt.overlap {
			t.Errorf("subjects.Overlap(%q, %q) = %v", tt.b, tt.a, got)
		}
		if got := subjects.Subset(tt.a, tt.b); got != tt.aWithin {
			t.Errorf("subjects.Subset(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}
