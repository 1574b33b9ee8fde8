package edge

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/topology"
)

// mountTmpfs mounts a size-limited tmpfs at dir, or skips the test.
func mountTmpfs(t *testing.T, dir string, mib int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: a full-disk test needs root to mount a size-limited tmpfs")
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm", mib)); err != nil {
		t.Skipf("skipping: cannot mount a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// fillDisk writes a filler file until the filesystem is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
	}
	// The last partial blocks too.
	small := make([]byte, 4096)
	for {
		if _, err := f.Write(small); err != nil {
			return
		}
	}
}

// A full disk at the edge: the edge stops ACKing, says why in its log,
// /readyz and /metrics, and resumes by itself once space is freed; every
// event completes exactly once.
func TestStorage_EdgeDiskFullStopsAndResumes(t *testing.T) {
	tmp := t.TempDir()
	edgeDir := filepath.Join(tmp, "edge1-data")
	if err := os.MkdirAll(edgeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, edgeDir, 64)
	logs := &syncBuffer{}
	var w io.Writer = logs
	if testing.Verbose() {
		w = io.MultiWriter(logs, testWriter{t})
	}
	ls := testSystem(t, LocalOptions{
		Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Configure: func(c *topology.Config) {
			if c.Site == "edge1" {
				c.DataDir = edgeDir
				// Stream reservations must fit in the tmpfs.
				c.JetStream.MaxStoreBytes = 64 << 20
				c.JetStream.MaxStreamBytes = 8 << 20
			}
		},
	}, nil)
	edge := ls.App("edge1")
	ops := edge.OpsAddr()
	js := clientJS(t, ls.App("l1").ClientURL())
	first := publishN(t, js, "before", 100)
	waitCompleted(t, ls, first, "edge1")

	filler := filepath.Join(edgeDir, "filler")
	fillDisk(t, filler)
	acked := metricValue(t, ops, "leafline_messages_acked_total")
	// Events keep arriving; the edge cannot store them.
	second := publishN(t, js, "during", 200)

	var rd Readiness
	check.For(t, 60*time.Second, 50*time.Millisecond, func() error {
		code, err := getJSON("http://"+ops+"/readyz", &rd)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(rd.Reason, "storage full") {
			return fmt.Errorf("/readyz %d %+v", code, rd)
		}
		return nil
	})
	t.Logf("/readyz while full: %s", rd.Reason)
	if v := metricValue(t, ops, "leafline_storage_full"); v != "1" {
		t.Errorf("leafline_storage_full = %s while the disk is full", v)
	}
	if len(logs.lines("edge1", "STORAGE FULL")) == 0 {
		t.Error("the edge's log does not say STORAGE FULL")
	}
	// Stopped: nothing more is ACKed while the disk is full.
	time.Sleep(3 * time.Second)
	if got := metricValue(t, ops, "leafline_messages_acked_total"); got != acked {
		t.Errorf("messages_acked_total went from %s to %s on a full disk", acked, got)
	}
	if got := ls.App("l1").Completions().Stats().Applied; got != uint64(len(first)) {
		t.Errorf("applied %d receipts on a full disk, want still %d", got, len(first))
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	check.For(t, 60*time.Second, 50*time.Millisecond, func() error {
		code, err := getJSON("http://"+ops+"/readyz", &rd)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz %d %+v", code, rd)
		}
		return nil
	})
	if v := metricValue(t, ops, "leafline_storage_full"); v != "0" {
		t.Errorf("leafline_storage_full = %s after space was freed", v)
	}
	waitCompleted(t, ls, append(first, second...), "edge1")
}
