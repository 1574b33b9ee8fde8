package topology

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestExampleConfigs_Load loads every example box config in configs/ and
// checks the settings the README and scripts rely on.
func TestExampleConfigs_Load(t *testing.T) {
	want := map[string]struct {
		role      Role
		nats, ops string
		sink      string
	}{
		"l1":    {RoleL1, "127.0.0.1:14222", "127.0.0.1:18222", "store"},
		"hub":   {RoleHub, "127.0.0.1:14223", "127.0.0.1:18223", "store"},
		"edge1": {RoleEdge, "127.0.0.1:14224", "127.0.0.1:18224", "store"},
		"edge2": {RoleEdge, "127.0.0.1:14225", "127.0.0.1:18225", "file"},
	}
	for _, box := range exampleBoxes {
		t.Run(box, func(t *testing.T) {
			path := filepath.Join(examplesDir, box+".json")
			c, err := LoadConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			s, ok := c.Topology.Site(c.Site)
			w := want[box]
			switch {
			case !ok || s.Role != w.role:
				t.Errorf("site %q: role %v", c.Site, s)
			case c.NATS.Listen != w.nats || c.Ops.Listen != w.ops:
				t.Errorf("listen nats=%s ops=%s", c.NATS.Listen, c.Ops.Listen)
			case c.Sink.Type != w.sink:
				t.Errorf("sink %q", c.Sink.Type)
			case c.Source != path || c.DataDir != "/tmp/leafline/"+box:
				t.Errorf("source %q data_dir %q", c.Source, c.DataDir)
			case !c.JetStream.Durable():
				t.Errorf("sync_interval %q", c.JetStream.SyncInterval)
			}
		})
	}
}

// TestExampleConfigs_RoundTrip: a loaded (defaulted) config and topology
// marshal back to JSON that parses to the same values.
func TestExampleConfigs_RoundTrip(t *testing.T) {
	topo, err := LoadTopology(filepath.Join(examplesDir, "topology.json"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseTopology(mustMarshal(t, topo), "again")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(topo, again) {
		t.Fatalf("topology changed:\n%+v\n%+v", topo, again)
	}
	for _, box := range exampleBoxes {
		t.Run(box, func(t *testing.T) {
			c, err := LoadConfig(filepath.Join(examplesDir, box+".json"))
			if err != nil {
				t.Fatal(err)
			}
			data := mustMarshal(t, c)
			path := writeBox(t, mustMarshal(t, topo), data)
			c2, err := LoadConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			c.Source, c2.Source = "", ""
			if !reflect.DeepEqual(c, c2) {
				t.Fatalf("config changed:\n%s\n%s", data, mustMarshal(t, c2))
			}
		})
	}
}

func TestLoadConfig_BothFilesReported(t *testing.T) {
	tp := exampleTopology(t)
	tp.Sites[2].Upstream = "hubb"
	c := exampleConfig(t, "edge1")
	c.Delivery.BatchSize = 5000
	c.Site = "edge9"
	path := writeBox(t, mustMarshal(t, tp), mustMarshal(t, c))
	_, err := LoadConfig(path)
	topoPath := filepath.Join(filepath.Dir(path), "topology.json")
	wantProblem(t, err, path, "delivery.batch_size", "outside 1..1000")
	wantProblem(t, err, path, "site", `unknown site "edge9"`)
	wantProblem(t, err, topoPath, "sites[2].upstream", `unknown site "hubb"`)
	if n := len(strings.Split(err.Error(), "\n")); n != 3 {
		t.Fatalf("got %d lines, want 3:\n%v", n, err)
	}
}

func TestLoadConfig_TopologyDecodeErrorAndConfigProblems(t *testing.T) {
	c := exampleConfig(t, "edge1")
	c.Log.Level = "loud"
	path := writeBox(t, []byte(`{"sites": [], "sites": []}`), mustMarshal(t, c))
	_, err := LoadConfig(path)
	wantProblem(t, err, path, "log.level", "not one of")
	wantProblem(t, err, filepath.Join(filepath.Dir(path), "topology.json"), "sites", "duplicate key")
}

func TestLoadConfig_TopologyPath(t *testing.T) {
	c := exampleConfig(t, "edge1")
	abs, err := filepath.Abs(filepath.Join(examplesDir, "topology.json"))
	if err != nil {
		t.Fatal(err)
	}
	c.TopologyFile = abs
	if _, err := LoadConfig(writeBox(t, nil, mustMarshal(t, c))); err != nil {
		t.Fatalf("absolute topology path: %v", err)
	}
	c.TopologyFile = "missing.json"
	path := writeBox(t, nil, mustMarshal(t, c))
	_, err = LoadConfig(path)
	wantProblem(t, err, path, "topology", "cannot read "+filepath.Join(filepath.Dir(path), "missing.json")+": no such file or directory")
}

func TestLoad_MissingFile(t *testing.T) {
	for name, load := range map[string]func(string) error{
		"LoadConfig":   func(p string) error { _, err := LoadConfig(p); return err },
		"LoadTopology": func(p string) error { _, err := LoadTopology(p); return err },
	} {
		err := load(filepath.Join(t.TempDir(), "nope.json"))
		if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v; want a wrapped fs.ErrNotExist that is not ErrInvalid", name, err)
		}
	}
}
