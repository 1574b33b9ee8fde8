package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leafline/leafline/internal/smalldisk"
)

// TestCheck_StorageLimits: check refuses a box whose streams' limits do
// not fit its disk, before a start would fail on them, and says the free
// space found, what the limits add up to and the setting to lower; on a
// disk with room it prints those figures.
func TestCheck_StorageLimits(t *testing.T) {
	dir := t.TempDir()
	copyTopology(t, dir)
	hub := func(name, dataDir string, jetstream map[string]any) string {
		p := filepath.Join(dir, name+".json")
		cfg := map[string]any{"topology": "topology.json", "site": "hub", "data_dir": dataDir,
			"nats": map[string]any{"listen": "127.0.0.1:14223"}, "ops": map[string]any{"listen": "127.0.0.1:18223"}}
		if jetstream != nil {
			cfg["jetstream"] = jetstream
		}
		writeJSONFile(t, p, cfg)
		return p
	}

	code, out, errs := runDispatch("check", "--config", hub("roomy", filepath.Join(dir, "hub"), nil))
	if code != exitOK || !strings.Contains(out, ": storage: ") || !strings.Contains(out, "HA and RH: jetstream.max_stream_bytes = 1 GiB each") {
		t.Errorf("check on a disk with room: exit %d, stdout %q, stderr %q; want the storage figures", code, out, errs)
	}

	small := filepath.Join(dir, "small")
	if err := os.Mkdir(small, 0o755); err != nil {
		t.Fatal(err)
	}
	smalldisk.Mount(t, small, 16)
	code, out, errs = runDispatch("check", "--config", hub("small", filepath.Join(small, "hub"), nil))
	for _, want := range []string{"do not fit", "16 MiB free on " + small, "reserve 2.0 GiB", "allows at most 12 MiB",
		"lower jetstream.max_stream_bytes to at most 5242880 (5 MiB)"} {
		if code != exitUsage || !strings.Contains(errs, want) {
			t.Errorf("check on a 16 MiB disk: exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errs, want)
		}
	}
	code, out, errs = runDispatch("check", "--config", hub("fits", filepath.Join(small, "hub"), map[string]any{"max_stream_bytes": 5242880}))
	if code != exitOK {
		t.Errorf("check with the value it advised: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
