package systest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/logx"
	"github.com/leafline/leafline/internal/logx/logxtest"
	"github.com/leafline/leafline/internal/smalldisk"
	"github.com/leafline/leafline/topology"
)

// fillDisk writes a filler file until the filesystem is full, then gives
// back leave bytes of it.
func fillDisk(t *testing.T, path string, leave int64) {
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
			break
		}
	}
	if leave > 0 {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(max(fi.Size()-leave, 0)); err != nil {
			t.Fatal(err)
		}
	}
}

// diskFullCase is one box on a small filesystem that fills up.
type diskFullCase struct {
	name      string
	site      string // the box whose data dir is on the small filesystem
	transport string // of every link
	// writesFail turns the free-space floor off (keepFree 0) and leaves
	// some space, which the events then fill: the box stops on the store
	// write, bbolt commit or write probe that fails for lack of space.
	writesFail bool
}

// A full disk on the hub or on an edge, with either transport, is the box's
// storage state: /readyz 503 naming the disk, leafline_storage_writable 0,
// the LeaflineStorageFull alert, nothing ACKed and no CPU spent while it
// lasts; once space is freed the box restarts itself, the links resume,
// and every event completes exactly once at L1.
func TestStorage_DiskFull_StopsReportsAndResumes(t *testing.T) {
	const relay, sourcing = topology.TransportRelay, topology.TransportSourcing
	for _, c := range []diskFullCase{
		{name: "hub/sourcing", site: "hub", transport: sourcing},
		{name: "hub/relay", site: "hub", transport: relay},
		{name: "edge/sourcing", site: "edge1", transport: sourcing},
		{name: "edge/relay", site: "edge1", transport: relay},
		{name: "hub/relay/writes-fail", site: "hub", transport: relay, writesFail: true},
		{name: "edge/sourcing/writes-fail", site: "edge1", transport: sourcing, writesFail: true},
		{name: "edge/relay/writes-fail", site: "edge1", transport: relay, writesFail: true},
	} {
		t.Run(c.name, func(t *testing.T) { testDiskFull(t, c) })
	}
}

func testDiskFull(t *testing.T, c diskFullCase) {
	dir := filepath.Join(t.TempDir(), c.site+"-data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	smalldisk.Mount(t, dir, 64)
	logs := &logxtest.Buffer{}
	var w io.Writer = logs
	if testing.Verbose() {
		w = io.MultiWriter(logs, logx.TestWriter(t))
	}
	t.Cleanup(func() {
		if t.Failed() && !testing.Verbose() {
			t.Logf("%s's log:\n%s", c.site, strings.Join(logs.Lines(c.site), "\n"))
		}
	})
	ls := testSystemWith(t, Options{
		Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Configure: func(cfg *topology.Config) {
			withTransport(c.transport, "")(cfg)
			if cfg.Site == c.site {
				cfg.DataDir = dir
				// Stream reservations must fit in the tmpfs.
				cfg.JetStream.MaxStoreBytes = 64 << 20
				cfg.JetStream.MaxStreamBytes = 16 << 20
			}
		},
	}, func(site string) leafline.Options {
		if site == c.site && c.writesFail {
			return leafline.Options{Box: []box.Option{box.WithKeepFree(func(uint64) uint64 { return 0 })}}
		}
		return leafline.Options{}
	})
	victim, svc := ls.App(c.site), leafline.Completions(ls.App("l1"))
	ops := victim.OpsAddr()
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	payload := []byte(`{"k":"` + strings.Repeat("x", 3000) + `"}`)
	first := publishData(t, js, "before", 100, payload)
	waitCompleted(t, ls, first, "edge1")

	filler := filepath.Join(dir, "filler")
	leave, during := int64(0), 200
	if c.writesFail {
		// 1 MiB left for 6 MB of events.
		leave, during = 1<<20, 2000
	}
	fillDisk(t, filler, leave)
	t.Cleanup(func() { os.Remove(filler) })
	full := time.Now()
	second := publishData(t, js, "during", during, payload)

	var rd box.Readiness
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		code, err := getJSON("http://"+ops+"/readyz", &rd)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(rd.Reason, "storage full") || !strings.Contains(rd.Reason, dir) {
			return fmt.Errorf("/readyz %d %+v", code, rd)
		}
		return nil
	})
	t.Logf("stopped %s after the disk filled; /readyz: %s", time.Since(full).Round(100*time.Millisecond), rd.Reason)
	for name, want := range map[string]string{"leafline_storage_full": "1", "leafline_storage_writable": "0", "leafline_jetstream_enabled": "0"} {
		if v := metricValue(t, ops, name); v != want {
			t.Errorf("%s = %s while the disk is full, want %s", name, v, want)
		}
	}
	if len(logs.Lines(c.site, "STORAGE FULL")) == 0 {
		t.Errorf("%s's log does not say STORAGE FULL", c.site)
	}
	storageAlertFires(t, ops)

	// Stopped: nothing is ACKed or completed, and the process is idle.
	applied := svc.Stats().Applied
	acked := metricValue(t, ls.App("edge1").OpsAddr(), "leafline_messages_acked_total")
	cpu0 := processCPU(t)
	time.Sleep(3 * time.Second)
	cpu := processCPU(t) - cpu0
	t.Logf("CPU of the whole test process (four boxes) in 3s with %s's disk full: %s", c.site, cpu.Round(time.Millisecond))
	if cpu > time.Second {
		t.Errorf("the test process used %s of CPU in 3s while %s's disk was full: something spins", cpu, c.site)
	}
	if got := svc.Stats().Applied; got != applied {
		t.Errorf("L1 applied %d receipts while %s's disk was full (had %d)", got, c.site, applied)
	}
	if c.site == "edge1" {
		if got := metricValue(t, ops, "leafline_messages_acked_total"); got != acked {
			t.Errorf("messages_acked_total went from %s to %s on a full disk", acked, got)
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	// A restart that fails at once (a start timing out on a loaded
	// machine) backs off 2s, 4s, 8s, ...: allow for two of them.
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
	ready := time.Since(freed)
	for name, want := range map[string]string{"leafline_storage_full": "0", "leafline_storage_writable": "1"} {
		if v := metricValue(t, ops, name); v != want {
			t.Errorf("%s = %s after space was freed, want %s", name, v, want)
		}
	}
	all := append(first, second...)
	waitCompleted(t, ls, all, "edge1")
	st := svc.Stats()
	t.Logf("space freed: ready again in %s, all %d events completed in %s; L1 applied %d, duplicates absorbed %d",
		ready.Round(100*time.Millisecond), len(all), time.Since(freed).Round(100*time.Millisecond), st.Applied, st.Duplicates)
}

// The file sink's directory on a filesystem of its own that fills up: the
// edge stops as on a full data dir, /readyz names the sink's directory, and
// once space is freed every event is written exactly once.
func TestStorage_FileSinkDirFull(t *testing.T) {
	sinkDir := filepath.Join(t.TempDir(), "sink")
	if err := os.MkdirAll(sinkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	smalldisk.Mount(t, sinkDir, 16)
	ls := testSystem(t, Options{
		Configure: func(cfg *topology.Config) {
			if cfg.Site == "edge1" {
				cfg.Sink.Type, cfg.Sink.Dir = "file", sinkDir
			}
		},
	}, nil)
	edge := ls.App("edge1")
	ops := edge.OpsAddr()
	js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	first := publishN(t, js, "before", 100)
	waitCompleted(t, ls, first, "edge1")

	filler := filepath.Join(sinkDir, ".filler")
	fillDisk(t, filler, 0)
	t.Cleanup(func() { os.Remove(filler) })
	second := publishN(t, js, "during", 200)
	var rd box.Readiness
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		code, err := getJSON("http://"+ops+"/readyz", &rd)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(rd.Reason, "storage full") || !strings.Contains(rd.Reason, sinkDir) {
			return fmt.Errorf("/readyz %d %+v", code, rd)
		}
		return nil
	})
	t.Logf("/readyz while the sink's disk is full: %s", rd.Reason)
	if v := metricValue(t, ops, "leafline_storage_writable"); v != "0" {
		t.Errorf("leafline_storage_writable = %s while the sink's disk is full", v)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	all := append(first, second...)
	waitCompleted(t, ls, all, "edge1")
	ents, err := os.ReadDir(sinkDir)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			files++
		}
	}
	if files != len(all) {
		t.Fatalf("the file sink holds %d files for %d events", files, len(all))
	}
}

// processCPU is the CPU time this process has used.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// storageAlertFires checks, with promtool, that the shipped
// LeaflineStorageFull rule fires on the storage series the box at ops
// exports now (held for the rule's 1m). Without promtool it says so and
// returns.
func storageAlertFires(t *testing.T, ops string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("no promtool on PATH: the alert rule is not evaluated")
		return
	}
	rules, err := filepath.Abs("../deploy/prometheus/leafline-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var series, labels strings.Builder
	site := ""
	for _, line := range strings.Split(string(body), "\n") {
		for _, name := range []string{"leafline_storage_full{", "leafline_storage_writable{", "leafline_jetstream_enabled{"} {
			if !strings.HasPrefix(line, name) {
				continue
			}
			sp := strings.LastIndexByte(line, ' ')
			fmt.Fprintf(&series, "      - series: '%s'\n        values: '%sx5'\n", line[:sp], line[sp+1:])
			if labels.Len() == 0 {
				// The box's own labels, for the expected alert.
				inner := line[len(name) : sp-1]
				for _, kv := range strings.Split(inner, ",") {
					k, v, _ := strings.Cut(kv, "=")
					fmt.Fprintf(&labels, "              %s: %s\n", k, v)
					if k == "site" {
						site = strings.Trim(v, `"`)
					}
				}
			}
		}
	}
	test := fmt.Sprintf(`rule_files: [%q]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
%s    alert_rule_test:
      - eval_time: 3m
        alertname: LeaflineStorageFull
        exp_alerts:
          - exp_labels:
              severity: critical
%s            exp_annotations:
              summary: "%s cannot write its data dir"
`, rules, series.String(), labels.String(), site)
	path := filepath.Join(t.TempDir(), "storage_alert_test.yml")
	if err := os.WriteFile(path, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("LeaflineStorageFull does not fire on the box's series: %v\n%s\n%s", err, out, test)
	}
}
