package topology

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// examples are the example configs in configs/, which every test that
// needs a valid starting point builds on.
const examplesDir = "../configs"

var exampleBoxes = []string{"l1", "hub", "edge1", "edge2"}

// exampleTopology returns the decoded (not defaulted) example topology.
func exampleTopology(t *testing.T) *Topology {
	t.Helper()
	var topo Topology
	readJSON(t, filepath.Join(examplesDir, "topology.json"), &topo)
	return &topo
}

// exampleConfig returns the decoded (not defaulted) example box config.
func exampleConfig(t *testing.T, site string) *Config {
	t.Helper()
	var c Config
	readJSON(t, filepath.Join(examplesDir, site+".json"), &c)
	return &c
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeBox writes a topology and a box config into a fresh directory and
// returns the config's path.
func writeBox(t *testing.T, topo, cfg []byte) string {
	t.Helper()
	dir := t.TempDir()
	if topo != nil {
		writeFile(t, filepath.Join(dir, "topology.json"), topo)
	}
	path := filepath.Join(dir, "box.json")
	writeFile(t, path, cfg)
	return path
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// problemsOf returns every problem in err, which must match ErrInvalid and
// hold one or more *ValidationError.
func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	if err == nil {
		t.Fatal("no error; want a validation error")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error does not match ErrInvalid: %v", err)
	}
	var out []Problem
	var walk func(error)
	walk = func(err error) {
		var ve *ValidationError
		switch x := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		default:
			if errors.As(err, &ve) {
				out = append(out, ve.Problems...)
			}
		}
	}
	walk(err)
	if len(out) == 0 {
		t.Fatalf("no *ValidationError in %v", err)
	}
	return out
}

// wantProblem asserts that err reports a problem at exactly path whose
// message contains msg, and that Error() has the line "<source>: <path>: ".
func wantProblem(t *testing.T, err error, source, path, msg string) {
	t.Helper()
	for _, p := range problemsOf(t, err) {
		if p.Path == path && strings.Contains(p.Msg, msg) {
			line := p.String()
			if source != "" {
				line = source + ": " + line
			}
			if !strings.Contains(err.Error(), line) {
				t.Fatalf("Error() lacks the line %q:\n%v", line, err)
			}
			return
		}
	}
	t.Fatalf("no problem at path %q containing %q; got:\n%v", path, msg, err)
}

// topologyCase is one bad topology: the example topology changed by
// mutate, and the problem it must be refused with.
type topologyCase struct {
	name   string
	mutate func(*Topology)
	path   string
	msg    string
}

// wantTopologyProblems checks each case in a subtest of its own.
func wantTopologyProblems(t *testing.T, cases []topologyCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			tp := exampleTopology(t)
			tt.mutate(tp)
			_, err := ParseTopology(mustMarshal(t, tp), "topology.json")
			wantProblem(t, err, "topology.json", tt.path, tt.msg)
		})
	}
}
