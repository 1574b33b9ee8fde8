package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leafline/leafline/outbox"
)

// outboxFixture writes a topology, an edge config and a hub config under a
// temp dir and returns the edge config path and its outbox path.
func outboxFixture(t *testing.T) (edgeCfg, hubCfg, dbPath string) {
	t.Helper()
	dir := t.TempDir()
	writeJSONFile(t, filepath.Join(dir, "topology.json"), map[string]any{
		"sites": []map[string]any{
			{"name": "l1", "role": "l1", "leafnode": map[string]any{"listen": "127.0.0.1:17001"}},
			// A stock nats-server hub (provision and trim tests).
			{"name": "hub", "role": "hub", "upstream": "l1", "server": "nats-server", "leafnode": map[string]any{"listen": "127.0.0.1:17002"}},
			{"name": "edge1", "role": "edge", "upstream": "hub"},
		},
	})
	for _, site := range []string{"edge1", "hub"} {
		writeJSONFile(t, filepath.Join(dir, site+".json"), map[string]any{
			"topology": "topology.json",
			"site":     site,
			"data_dir": filepath.Join(dir, site),
		})
	}
	return filepath.Join(dir, "edge1.json"), filepath.Join(dir, "hub.json"), filepath.Join(dir, "edge1", "outbox.db")
}

// fillOutbox stores n receipts and marks the first published of them.
func fillOutbox(t *testing.T, path string, n, published int) {
	t.Helper()
	ob, err := outbox.Open(path, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	recs := make([]outbox.Record, n)
	keys := make([]string, published)
	for i := range recs {
		recs[i] = outbox.Record{Key: fmt.Sprintf("rcpt-%d", i), Subject: "leafline.receipts.edge1.processed", Data: []byte(`{}`)}
		if i < published {
			keys[i] = recs[i].Key
		}
	}
	if _, err := ob.Commit(recs, nil); err != nil {
		t.Fatal(err)
	}
	if err := ob.MarkPublished(keys); err != nil {
		t.Fatal(err)
	}
}

func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = cmdOutbox(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestOutboxCheck(t *testing.T) {
	edgeCfg, hubCfg, db := outboxFixture(t)

	t.Run("missing file is reported, not created", func(t *testing.T) {
		code, _, stderr := runCmd("check", "--config", edgeCfg)
		if code != exitFailure || !strings.Contains(stderr, db) {
			t.Fatalf("code %d, stderr %q", code, stderr)
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Fatalf("check created %s", db)
		}
	})

	fillOutbox(t, db, 10, 4)

	t.Run("intact", func(t *testing.T) {
		code, stdout, stderr := runCmd("check", "--config", edgeCfg)
		if code != exitOK || !strings.Contains(stdout, "ok (6 pending, 4 published)") {
			t.Fatalf("code %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})

	t.Run("locked by a running box", func(t *testing.T) {
		ob, err := outbox.Open(db, outbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer ob.Close()
		code, _, stderr := runCmd("check", "--config", edgeCfg)
		if code != exitFailure || !strings.Contains(stderr, "locked") || !strings.Contains(stderr, "stop the edge box") {
			t.Fatalf("code %d, stderr %q", code, stderr)
		}
	})

	t.Run("not an edge", func(t *testing.T) {
		code, _, stderr := runCmd("check", "--config", hubCfg)
		if code != exitUsage || !strings.Contains(stderr, "only edge boxes") {
			t.Fatalf("code %d, stderr %q", code, stderr)
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{{}, {"bogus"}, {"check"}, {"check", "--config", edgeCfg, "extra"}} {
			if code, _, _ := runCmd(args...); code != exitUsage {
				t.Errorf("%q: code %d, want %d", args, code, exitUsage)
			}
		}
	})

	t.Run("corrupt", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			damage func(b []byte) []byte
		}{
			{"truncated", func(b []byte) []byte { return b[:len(b)/2+100] }},
			{"meta page flipped", func(b []byte) []byte { b[40] ^= 0xff; return b }}, // inside meta page 0 (root bucket)
			{"empty", func(b []byte) []byte { return nil }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				good, err := os.ReadFile(db)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.WriteFile(db, good, 0o600) })
				if err := os.WriteFile(db, tc.damage(bytes.Clone(good)), 0o600); err != nil {
					t.Fatal(err)
				}
				code, _, stderr := runCmd("check", "--config", edgeCfg)
				if code != exitFailure || !strings.Contains(stderr, db) || !strings.Contains(stderr, "corrupt") {
					t.Fatalf("code %d, stderr %q", code, stderr)
				}
				if code, _, _ := runCmd("inspect", "--config", edgeCfg); code != exitFailure {
					t.Fatalf("inspect of a corrupt file: code %d", code)
				}
			})
		}
	})
}

func TestOutboxInspect(t *testing.T) {
	edgeCfg, _, db := outboxFixture(t)
	fillOutbox(t, db, 5, 2)

	code, stdout, stderr := runCmd("inspect", "--config", edgeCfg)
	if code != exitOK {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"pending:         3", "published:       2", "oldest pending:  20"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, stdout)
		}
	}

	code, stdout, stderr = runCmd("inspect", "--config", edgeCfg, "--json")
	if code != exitOK {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	var rep outboxReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if rep.Path != db || rep.Pending != 3 || rep.Published != 2 || rep.OldestPending == nil || rep.OldestPendingAgeS < 0 {
		t.Fatalf("report %+v", rep)
	}

	fillOutbox(t, db, 5, 5) // the same keys: nothing new, all published now
	code, stdout, _ = runCmd("inspect", "--config", edgeCfg, "--json")
	rep = outboxReport{}
	if err := json.Unmarshal([]byte(stdout), &rep); code != exitOK || err != nil || rep.Pending != 0 || rep.OldestPending != nil {
		t.Fatalf("code %d, %+v, %s", code, rep, stdout)
	}
}
