package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"

	"github.com/leafline/leafline/topology/internal/strictjson"
)

// ParseTopology decodes a topology strictly (see the package doc), fills
// its defaults and validates it. source names the input in error messages.
// Every problem is reported at once in a *ValidationError matching
// ErrInvalid.
func ParseTopology(data []byte, source string) (*Topology, error) {
	t, p := parseTopology(data)
	if err := p.err(source); err != nil {
		return nil, err
	}
	return t, nil
}

// LoadTopology reads the topology file at path and parses it like
// ParseTopology. An unreadable file is reported as the I/O error, wrapped,
// which does not match ErrInvalid.
func LoadTopology(path string) (*Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	return ParseTopology(data, path)
}

// parseTopology decodes, defaults and validates. It returns the topology
// whenever it decoded, valid or not, with every problem found.
func parseTopology(data []byte) (*Topology, problems) {
	var p problems
	t := new(Topology)
	if !decodeStrict(data, t, &p) {
		return nil, p
	}
	t.SetDefaults()
	t.validate(&p)
	return t, p
}

// ParseConfig decodes a box config strictly, fills its defaults and
// validates the box-local settings only: it neither loads the topology nor
// checks the config against one (LoadConfig does both). source names the
// input in error messages and becomes the config's Source.
func ParseConfig(data []byte, source string) (*Config, error) {
	var p problems
	c := new(Config)
	if !decodeStrict(data, c, &p) {
		return nil, p.err(source)
	}
	c.Source = source
	c.SetDefaults()
	c.validateLocal(&p)
	if err := p.err(source); err != nil {
		return nil, err
	}
	return c, nil
}

// LoadConfig reads the box config at path, loads the topology it names
// (a relative "topology" path is relative to the config file's directory),
// fills the defaults of both and validates both, the config against the
// topology included. On success the config's Topology and Source are set.
//
// Every problem in either file is reported at once: the error is a
// *ValidationError, or, when both files have problems, errors.Join of the
// config's and then the topology's. Both match ErrInvalid. A config file
// that cannot be read is reported as the I/O error, wrapped; a topology
// file that cannot be read is a problem of the config's "topology" key.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	var p problems
	c := new(Config)
	if !decodeStrict(data, c, &p) {
		return nil, p.err(path)
	}
	c.Source = path
	var topoErr error
	if c.TopologyFile != "" {
		var t *Topology
		t, topoErr = loadConfigTopology(&p, topologyPath(path, c.TopologyFile))
		c.Topology = t
	}
	c.SetDefaults()
	c.validateLocal(&p)
	if c.Topology != nil {
		c.validateAgainst(&p, c.Topology)
	}
	if err := errors.Join(p.err(path), topoErr); err != nil {
		return nil, err
	}
	return c, nil
}

// topologyPath resolves a config's "topology" value against the directory
// of the config file.
func topologyPath(configPath, topologyFile string) string {
	if filepath.IsAbs(topologyFile) {
		return topologyFile
	}
	return filepath.Join(filepath.Dir(configPath), topologyFile)
}

// loadConfigTopology loads the topology a config names. It returns the
// topology whenever it decoded, so that the config can still be checked
// against it, and the topology's own problems as a *ValidationError. A
// read failure is recorded in cp as a problem of the config.
func loadConfigTopology(cp *problems, path string) (*Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		cp.add("topology", "cannot read %s: %v", path, err)
		return nil, nil
	}
	t, tp := parseTopology(data)
	return t, tp.err(path)
}

// decodeStrict decodes the JSON object in data into v, a pointer to a
// struct, and records every decoding problem in p with its path (see the
// package doc for what is refused). It reports whether v was decoded; when
// it returns false, v is unchanged.
func decodeStrict(data []byte, v any, p *problems) bool {
	found := strictjson.Decode(data, v, strictOptions)
	for _, f := range found {
		*p = append(*p, Problem{Path: f.Path, Msg: f.Msg})
	}
	return len(found) == 0
}

// strictOptions make a Duration a JSON string that Duration.UnmarshalJSON
// accepts.
var strictOptions = strictjson.Options{StringTypes: map[reflect.Type]strictjson.StringType{
	reflect.TypeFor[Duration](): {
		Want: `a duration string such as "30s"`,
		Check: func(s string) error {
			var d Duration
			return d.UnmarshalJSON(strconv.AppendQuote(nil, s))
		},
	},
}}
