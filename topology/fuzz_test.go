package topology

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func addExampleSeeds(f *testing.F, names ...string) {
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(examplesDir, n+".json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzParseTopology: ParseTopology never panics, and returns either a
// topology that validates or an error matching ErrInvalid.
func FuzzParseTopology(f *testing.F) {
	addExampleSeeds(f, "topology")
	f.Add([]byte(`{"sites": [{"name": "a", "leafnode": {"listen": "x:1", "listen": "y:1"}}]}`))
	f.Add([]byte(`{"events": {"subjects": ["events.*.>", "a.b"]}, "sites": [{"name": "e", "role": "edge", "upstream": "e", "filter": "events.x"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tp, err := ParseTopology(data, "fuzz.json")
		checkParseResult(t, err, tp == nil)
		if err == nil {
			if err := tp.Validate(); err != nil {
				t.Fatalf("parsed topology does not validate: %v", err)
			}
		}
	})
}

// FuzzParseConfig: ParseConfig never panics, and returns either a config
// that validates or an error matching ErrInvalid.
func FuzzParseConfig(f *testing.F) {
	addExampleSeeds(f, exampleBoxes...)
	f.Add([]byte(`{"delivery": {"batch_size": 1e400, "retry": {"mode": "x"}}, "ops": {"listen": ":1"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data, "fuzz.json")
		checkParseResult(t, err, c == nil)
		if err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("parsed config does not validate: %v", err)
			}
		}
	})
}

func checkParseResult(t *testing.T, err error, isNil bool) {
	t.Helper()
	switch {
	case err != nil && !errors.Is(err, ErrInvalid):
		t.Fatalf("error does not match ErrInvalid: %v", err)
	case err != nil && !isNil:
		t.Fatal("a value returned with an error")
	case err == nil && isNil:
		t.Fatal("neither a value nor an error")
	}
}
