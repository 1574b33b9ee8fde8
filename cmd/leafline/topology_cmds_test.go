package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafline/leafline/topology"
	"github.com/leafline/leafline/topology/linkperm"
	"github.com/leafline/leafline/topology/render"
)

func runTopology(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cmdTopology(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestTopologyCerts_SecuresTheExamples: `leafline topology certs` turns the
// example configs into ones with mutual TLS and an nkey per site, which
// load, whose files exist, that lint clean of link warnings, and whose
// rendered hub configuration a stock nats-server loads.
func TestTopologyCerts_SecuresTheExamples(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	boxes := []string{"../../configs/l1.json", "../../configs/hub.json", "../../configs/edge1.json", "../../configs/edge2.json"}
	out, errs, code := runTopology(t, append([]string{"certs", "--topology", "../../configs/topology.json", "--dir", dir}, boxes...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "wrote "+filepath.Join(dir, "edge2.json")) {
		t.Fatalf("output:\n%s", out)
	}
	for _, site := range []string{"l1", "hub", "edge1", "edge2"} {
		cfg, err := topology.LoadConfig(filepath.Join(dir, site+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.CheckFiles(); err != nil {
			t.Fatal(err)
		}
		for _, w := range lintConfig(cfg) {
			if strings.Contains(w, "not encrypted") || strings.Contains(w, "without credentials") {
				t.Errorf("%s: %s", site, w)
			}
		}
	}
	want := os.FileMode(0o600)
	if runtime.GOOS == "windows" {
		want = 0o666 // no permission bits on Windows: Go reports 0o666 for a writable file
	}
	if fi, err := os.Stat(filepath.Join(dir, "edge1.nk")); err != nil || fi.Mode().Perm() != want {
		t.Fatalf("seed file: %v %v; want %v", fi, err, want)
	}
	// Running it again never overwrites a key.
	if _, _, code := runTopology(t, "certs", "--topology", "../../configs/topology.json", "--dir", dir); code != exitFailure {
		t.Fatalf("second run: exit %d", code)
	}

	conf, errs, code := runTopology(t, "render", "--config", filepath.Join(dir, "hub.json"))
	if code != exitOK {
		t.Fatalf("render: exit %d: %s", code, errs)
	}
	seed, _ := os.ReadFile(filepath.Join(dir, "hub.nk"))
	if strings.Contains(conf, strings.TrimSpace(string(seed))) {
		t.Fatal("rendered config holds the seed")
	}
	t.Setenv(render.SeedEnv("hub"), strings.TrimSpace(string(seed)))
	path := filepath.Join(t.TempDir(), "hub.conf")
	os.WriteFile(path, []byte(conf), 0o600)
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%v\n%s", err, conf)
	}
	if len(opts.Nkeys) != 2 || opts.LeafNode.TLSConfig == nil || opts.JetStreamDomain != "hub" {
		t.Fatalf("nkeys %d tls %v domain %q", len(opts.Nkeys), opts.LeafNode.TLSConfig != nil, opts.JetStreamDomain)
	}

	permOut, errs, code := runTopology(t, "permissions", "--config", filepath.Join(dir, "edge1.json"))
	if code != exitOK {
		t.Fatalf("permissions: %s", errs)
	}
	var p linkperm.Permissions
	// Between leafline boxes the link is a relay: edge1 receives on its
	// relay's inbox.
	if err := json.Unmarshal([]byte(permOut), &p); err != nil || p.Subscribe[0] != topology.RelayInboxPrefix("edge1")+".>" {
		t.Fatalf("%v %+v", err, p)
	}
}

func TestLintConfig_Examples(t *testing.T) {
	cfg, err := topology.LoadConfig("../../configs/edge1.json")
	if err != nil {
		t.Fatal(err)
	}
	ws := strings.Join(lintConfig(cfg), "\n")
	for _, want := range []string{"not encrypted", "without credentials", "events.duplicate_window"} {
		if !strings.Contains(ws, want) {
			t.Errorf("no %q warning in:\n%s", want, ws)
		}
	}
}

func TestTopologyRender_Usage(t *testing.T) {
	for _, args := range [][]string{
		{"render"},
		{"render", "--topology", "../../configs/topology.json"},
		{"render", "--topology", "../../configs/topology.json", "--site", "nowhere"},
		{"certs", "--topology", "../../configs/topology.json"},
		{"bogus"},
	} {
		if _, _, code := runTopology(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	out, _, code := runTopology(t, "render", "--topology", "../../configs/topology.json", "--site", "l1")
	if code != exitOK || !strings.Contains(out, `domain: "l1"`) || !strings.Contains(out, "placeholders") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
