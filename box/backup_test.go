package box

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leafline/leafline/topology"
)

// edgeConfig is configs/edge1.json with its data dir in dir.
func edgeConfig(t *testing.T, dir string) *topology.Config {
	t.Helper()
	cfg, err := topology.LoadConfig(filepath.Join("..", "configs", "edge1.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dir
	return cfg
}

// A backup holds every file of the data dir but its lock; a restore
// writes them back into an empty data dir only, for the same site only,
// and a backup of a data dir whose box runs is refused.
func TestBackup_RestoreRoundTrip(t *testing.T) {
	src := t.TempDir()
	for name, data := range map[string]string{"outbox.db": "outbox", "jetstream/a/b.blk": "block", dataDirLockName: ""} {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var archive bytes.Buffer
	m, err := Backup(edgeConfig(t, src), &archive)
	if err != nil || m.Files != 2 || m.Site != "edge1" {
		t.Fatalf("backup: %+v, %v", m, err)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(edgeConfig(t, dst), bytes.NewReader(archive.Bytes())); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "jetstream", "a", "b.blk")); err != nil || string(b) != "block" {
		t.Fatalf("restored file: %q, %v", b, err)
	}
	if _, err := Restore(edgeConfig(t, dst), bytes.NewReader(archive.Bytes())); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a restore into a data dir that holds files: %v", err)
	}
	other := edgeConfig(t, t.TempDir())
	other.Site = "edge2"
	if _, err := Restore(other, bytes.NewReader(archive.Bytes())); err == nil || !strings.Contains(err.Error(), `site "edge1"`) {
		t.Fatalf("a restore of another site's backup: %v", err)
	}
	release, err := lockDataDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := Backup(edgeConfig(t, src), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "stop the box first") {
		t.Fatalf("a backup of a running box's data dir: %v", err)
	}
}
