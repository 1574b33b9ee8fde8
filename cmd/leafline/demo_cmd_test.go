package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafline/leafline/sink"
)

// demoOK runs the demo with args and checks its summary line.
func demoOK(t *testing.T, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs three boxes; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := dispatch(ctx, append([]string{"demo", "--events", "60", "--cut", "500ms", "--timeout", "90s"}, args...), &out, &errb)
	if code != exitOK || !strings.Contains(out.String(), "processed=60 completed=60 duplicate_completions=0 incomplete=0 lost=0") {
		t.Fatalf("demo %v: exit %d\nstdout: %s\nstderr: %s", args, code, out.String(), errb.String())
	}
	return errb.String()
}

func TestDemo_ExecSink(t *testing.T) {
	dir := t.TempDir()
	worker, err := filepath.Abs("../../examples/exec/worker.sh")
	if err != nil {
		t.Fatal(err)
	}
	progress := demoOK(t, "--sink", "exec", "--sink-command", "sh "+worker+" "+dir)
	if !strings.Contains(progress, "sink exec") {
		t.Errorf("the demo does not say which sink edge1 runs:\n%s", progress)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 60 {
		t.Errorf("the worker holds %d events, want 60", len(files))
	}
}

func TestDemo_HTTPSink(t *testing.T) {
	var mu sync.Mutex
	got := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Events []json.RawMessage }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, raw := range body.Events {
			ev, err := sink.DecodeEvent(raw)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			got[ev.ID] = true
		}
	}))
	defer srv.Close()
	demoOK(t, "--sink", "http", "--sink-url", srv.URL+"/events")
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 60 {
		t.Errorf("the service received %d distinct events, want 60", len(got))
	}
}

func TestDemo_SinkFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sink", "kafka"}, `--sink: "kafka" is not one of store, file, http, exec, postgres, nats`},
		{[]string{"--sink", "file", "--sink-url", "http://x"}, "--sink-url does not apply to --sink file"},
		{[]string{"--sink", "exec", "--sink-subject", "a"}, "--sink-subject does not apply to --sink exec"},
	} {
		var out, errb bytes.Buffer
		code := dispatch(context.Background(), append([]string{"demo"}, tc.args...), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("demo %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errb.String(), exitUsage, tc.want)
		}
	}
}

func TestBench_Command(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"bench", "--help"}, &out, &errb); code != exitOK || !strings.Contains(out.String()+errb.String(), "-sinks") {
		t.Fatalf("bench --help: exit %d, output %q", code, out.String()+errb.String())
	}
	if code := dispatch(context.Background(), []string{"bench", "--sinks", "store,nosuch", "--events", "100"}, &out, &errb); code != exitFailure || !strings.Contains(errb.String(), `unknown sink "nosuch"`) {
		t.Fatalf("bench with an unknown sink: exit %d, stderr %q", code, errb.String())
	}
	if testing.Short() {
		return
	}
	out.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code := dispatch(ctx, []string{"bench", "--sinks", "store,http", "--events", "500"}, &out, &errb); code != exitOK {
		t.Fatalf("bench: exit %d\n%s", code, errb.String())
	}
	if !strings.Contains(out.String(), "bench sinks store_eps=") || !strings.Contains(out.String(), " http_eps=") {
		t.Fatalf("bench output has no bench line:\n%s", out.String())
	}
}

// buildCrashWorker builds the exec worker of internal/demo/testdata (under cmd/leafline),
// which exits every N events (see its doc).
func buildCrashWorker(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs three boxes; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "crashworker")
	out, err := exec.Command("go", "build", "-o", bin, "./internal/demo/testdata/crashworker").CombinedOutput()
	if err != nil {
		t.Fatalf("build the crash worker: %v\n%s", err, out)
	}
	return bin
}

// A worker that exits every 97 events costs restarts, not events: the
// demo completes all 1000.
func TestDemo_ExecWorkerCrashEvery97(t *testing.T) {
	bin := buildCrashWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := dispatch(ctx, []string{"demo", "--events", "1000", "--timeout", "4m", "--sink", "exec",
		"--sink-command", bin + " -crash-every 97 " + t.TempDir()}, &out, &errb)
	if code != exitOK || !strings.Contains(out.String(), "processed=1000 completed=1000 duplicate_completions=0 incomplete=0 lost=0") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
}

// Events a broken worker never takes are still in the edge's stream when
// the demo gives up: incomplete, not lost, and the exit says so.
func TestDemo_IncompleteIsNotLost(t *testing.T) {
	bin := buildCrashWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := dispatch(ctx, []string{"demo", "--events", "20", "--cut", "200ms", "--timeout", "3s", "--sink", "exec",
		"--sink-command", bin + " -crash-every 1 " + t.TempDir()}, &out, &errb)
	if code != exitFailure || !strings.Contains(out.String(), "completed=0 duplicate_completions=0 incomplete=20 lost=0") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "20 events incomplete") || strings.Contains(errb.String(), "lost:") {
		t.Errorf("the exit message does not say the events are incomplete:\n%s", errb.String())
	}
}
