//go:build unix

package sink_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/topology"
)

// execWorkerArg, as the test binary's first argument, makes it the test
// worker (see execTestWorker) instead of running the tests.
const execWorkerArg = "leafline-exec-test-worker"

func init() {
	if len(os.Args) == 3 && os.Args[1] == execWorkerArg {
		os.Exit(execTestWorker(os.Args[2]))
	}
}

// execTestWorker is the worker of these tests: the test binary run again
// with its state directory dir. It stores each event as one file per
// event_id under dir/events (idempotently), and reads control files in dir
// for every event:
//
//	down            exit at once (also when starting), without answering
//	delay           a duration to sleep before answering
//	garble          "malformed": answer with a line that is not JSON;
//	                "oversize": answer with a line over 1 MiB
//	refuse-<name>   "fail", "retry N" (then removed), or "weird" (result
//	                "maybe") for the event whose sink.FileName is <name>
//	shuffle         work on events concurrently, answering out of order
//	extra           also answer an event_id nobody waits for
//	answer-only     (read at start) answer ok at once, reading no other
//	                control file and storing nothing (the benchmark)
//	ignore-eof      keep running when stdin closes
//	stderr          text written to stderr when starting
//
// It appends each event_id it receives to dir/received, and creates
// dir/started-<pid> when it starts (not when down).
func execTestWorker(dir string) int {
	has := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b))
	}
	if has("down") {
		return 3
	}
	pid := os.Getpid()
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("started-%d", pid)), nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if b, err := os.ReadFile(filepath.Join(dir, "stderr")); err == nil {
		os.Stderr.Write(b)
	}
	fmt.Fprintf(os.Stderr, "test worker %d: started\n", pid)

	var outMu sync.Mutex
	answer := func(line []byte) {
		outMu.Lock()
		defer outMu.Unlock()
		if _, err := os.Stdout.Write(append(line, '\n')); err != nil {
			os.Exit(4)
		}
	}
	result := func(id, res, msg string) {
		b, _ := json.Marshal(sink.Result{EventID: id, Result: res, Error: msg})
		answer(b)
	}
	handle := func(ev sink.Event) {
		if d, err := time.ParseDuration(read("delay")); err == nil {
			time.Sleep(d)
		}
		switch read("garble") {
		case "malformed":
			answer([]byte("this is not a result"))
			return
		case "oversize":
			answer(bytes.Repeat([]byte("x"), sink.ExecMaxResultLine+100))
			return
		}
		if has("extra") {
			result("not-awaited-"+ev.ID, sink.ResultOK, "")
		}
		refusal := "refuse-" + sink.FileName(ev.ID)
		switch r := read(refusal); {
		case r == "fail":
			result(ev.ID, sink.ResultFail, "refused by the test")
			return
		case r == "weird":
			result(ev.ID, "maybe", "")
			return
		case strings.HasPrefix(r, "retry "):
			n, _ := strconv.Atoi(strings.TrimPrefix(r, "retry "))
			if n <= 1 {
				os.Remove(filepath.Join(dir, refusal))
			} else {
				os.WriteFile(filepath.Join(dir, refusal), fmt.Appendf(nil, "retry %d", n-1), 0o600)
			}
			result(ev.ID, sink.ResultRetry, "asked to retry by the test")
			return
		}
		if err := execStoreEvent(filepath.Join(dir, "events"), ev); err != nil {
			result(ev.ID, sink.ResultRetry, err.Error())
			return
		}
		result(ev.ID, sink.ResultOK, "")
	}

	received, err := os.OpenFile(filepath.Join(dir, "received"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	answerOnly := has("answer-only")
	var wg sync.WaitGroup
	in := bufio.NewReaderSize(os.Stdin, 1<<16)
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			break
		}
		ev, err := sink.DecodeEvent(line)
		if err != nil {
			fmt.Fprintf(os.Stderr, "test worker: bad event line: %v\n", err)
			return 2
		}
		if answerOnly {
			result(ev.ID, sink.ResultOK, "")
			continue
		}
		fmt.Fprintln(received, ev.ID)
		if has("down") {
			return 3
		}
		if has("shuffle") {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(20-ev.StreamSeq%20) * time.Millisecond) // later ones first
				handle(ev)
			}()
			continue
		}
		handle(ev)
	}
	wg.Wait()
	if has("ignore-eof") {
		select {}
	}
	return 0
}

// execStoreEvent writes ev to dir/<sink.FileName(id)> unless it is there:
// a temporary file renamed into place.
func execStoreEvent(dir string, ev sink.Event) error {
	final := filepath.Join(dir, sink.FileName(ev.ID))
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(ev.Data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), final)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// execTarget is the test worker behind an exec sink, with its state
// directory.
type execTarget struct {
	dir string
	log *slog.Logger
	// cfg adjusts the sink's config (a Timeout of 10s, a RestartBackoff of
	// 50ms) before NewSink starts it.
	cfg func(*topology.ExecSinkConfig)
}

func newExecTarget(t testing.TB) *execTarget {
	return &execTarget{dir: t.TempDir(), log: slog.New(slog.DiscardHandler)}
}

func (x *execTarget) config() topology.ExecSinkConfig {
	cfg := topology.ExecSinkConfig{
		Command:        []string{os.Args[0], execWorkerArg, x.dir},
		Timeout:        topology.Duration(10 * time.Second),
		RestartBackoff: topology.Duration(50 * time.Millisecond),
	}
	if x.cfg != nil {
		x.cfg(&cfg)
	}
	return cfg
}

func (x *execTarget) newExec(t testing.TB) *sink.ExecSink {
	t.Helper()
	s, err := sink.NewExec(x.config(), x.log)
	if err != nil {
		t.Fatalf("NewExec: %v", err)
	}
	return s
}

// NewSink returns a sink the suite closes itself.
func (x *execTarget) NewSink(t *testing.T) sink.Sink { return x.newExec(t) }

// openExec returns a sink closed at the end of the test.
func (x *execTarget) openExec(t testing.TB) *sink.ExecSink {
	t.Helper()
	s := x.newExec(t)
	t.Cleanup(func() { s.Close() })
	return s
}

func (x *execTarget) Stored(t *testing.T, id string) int {
	_, err := os.Stat(filepath.Join(x.dir, "events", sink.FileName(id)))
	switch {
	case err == nil:
		return 1
	case errors.Is(err, os.ErrNotExist):
		return 0
	}
	t.Fatal(err)
	return 0
}

func (x *execTarget) set(t testing.TB, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(x.dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (x *execTarget) clear(t testing.TB, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(x.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

func (x *execTarget) Refuse(t *testing.T, id string, permanent bool, times int) {
	how := fmt.Sprintf("retry %d", times)
	if permanent {
		how = "fail"
	}
	x.set(t, "refuse-"+sink.FileName(id), how)
}

// SetDown(true) makes the worker exit at its next event, and every new one
// exit at once. SetDown(false) returns once a worker that is up has started
// (a target that is back, as the sink sees it).
func (x *execTarget) SetDown(t *testing.T, down bool) {
	if down {
		x.set(t, "down", "")
		return
	}
	for _, pid := range x.pids(t) {
		x.clear(t, fmt.Sprintf("started-%d", pid))
	}
	x.clear(t, "down")
	// The sink starts the next worker when its restart delay is over: up
	// to 30s after a long outage.
	execCheckFor(t, 45*time.Second, func() error {
		if len(x.pids(t)) == 0 {
			return errors.New("no worker has started since the target came back")
		}
		return nil
	})
}

func (x *execTarget) SetDelay(t *testing.T, d time.Duration) {
	if d == 0 {
		x.clear(t, "delay")
		return
	}
	x.set(t, "delay", d.String())
}

func (x *execTarget) Garble(t *testing.T, how string) {
	if how == "" {
		x.clear(t, "garble")
		return
	}
	x.set(t, "garble", how)
}

// pids returns the process ids of the workers that have started.
func (x *execTarget) pids(t testing.TB) []int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(x.dir, "started-*"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(name), "started-"))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// received returns how many times the workers received each event_id.
func (x *execTarget) received(t testing.TB) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(x.dir, "received"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	n := make(map[string]int)
	for _, id := range strings.Fields(string(b)) {
		n[id]++
	}
	return n
}

// execCheckFor calls fn until it returns nil, and fails the test with its
// last error if timeout passes first.
func execCheckFor(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// execWrite calls Write with a bound.
func execWrite(t testing.TB, s sink.Sink, evs []sink.Event) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := s.Write(ctx, evs)
	if len(errs) != len(evs) {
		t.Fatalf("Write returned %d results for %d events", len(errs), len(evs))
	}
	return errs
}

func execAllOK(errs []error) error {
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	return nil
}

func execWantTemporary(t testing.TB, err error, what string) {
	t.Helper()
	if err == nil || sink.IsPermanent(err) {
		t.Errorf("%s: want a temporary failure, got %v", what, err)
	}
}

// execLogBuffer is a log destination that tests read while the sink
// writes to it.
type execLogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *execLogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *execLogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *execLogBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines returns the log lines that contain every one of parts.
func (b *execLogBuffer) lines(parts ...string) []string {
	var out []string
next:
	for _, l := range strings.Split(b.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

func TestExecSink_Conformance(t *testing.T) {
	x := newExecTarget(t)
	// Shorter than the slow case's 4s, and long enough for a worker (the
	// test binary, with -race) that has just started under load.
	x.cfg = func(c *topology.ExecSinkConfig) { c.Timeout = topology.Duration(3 * time.Second) }
	sinktest.Run(t, x)
}

func TestNewExec_Errors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "worker")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  topology.ExecSinkConfig
		want string
	}{
		{"no command", topology.ExecSinkConfig{}, "sink.exec.command"},
		{"not found", topology.ExecSinkConfig{Command: []string{"leafline-no-such-worker"}}, "sink.exec.command"},
		{"not found by path", topology.ExecSinkConfig{Command: []string{filepath.Join(dir, "missing")}}, "sink.exec.command"},
		{"not executable", topology.ExecSinkConfig{Command: []string{notExec}}, "sink.exec.command"},
		{"dir missing", topology.ExecSinkConfig{Command: []string{"sh"}, Dir: filepath.Join(dir, "nope")}, "sink.exec.dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sink.NewExec(tc.cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				s.Close()
				t.Fatal("NewExec succeeded")
			}
			if !strings.HasPrefix(err.Error(), tc.want+":") {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
		})
	}
}

// A worker that exits at once is a target that is down, not a config
// error: NewExec succeeds, Write fails at once while the sink waits to
// restart it, the delay doubles, and the events go through once it is up.
func TestExecSink_DownAtStart(t *testing.T) {
	x := newExecTarget(t)
	var logs execLogBuffer
	x.log = logs.logger()
	x.set(t, "down", "")
	s := x.openExec(t)
	execCheckFor(t, 10*time.Second, func() error {
		if len(logs.lines("restarting worker", "restart_in=400ms")) == 0 {
			return errors.New("no restart delayed by 400ms (50ms doubled three times) yet")
		}
		return nil
	})
	if n := len(logs.lines("worker exited", "exit_code=3")); n < 4 {
		t.Errorf("%d exits with code 3 logged, want at least 4", n)
	}
	evs := sinktest.Events(2)
	start := time.Now()
	errs := execWrite(t, s, evs)
	if d := time.Since(start); d > 300*time.Millisecond {
		t.Errorf("Write took %v while the worker was down", d)
	}
	for i, err := range errs {
		execWantTemporary(t, err, fmt.Sprintf("event %d", i))
		if !errors.Is(err, sink.ErrUnavailable) {
			t.Errorf("event %d: want ErrUnavailable, got %v", i, err)
		}
	}
	x.SetDown(t, false)
	if err := execAllOK(execWrite(t, s, evs)); err != nil {
		t.Fatal(err)
	}
}

// While the sink waits out a restart delay, Write fails at once, with the
// time left as RetryAfter.
func TestExecSink_FailsFastWhileRestarting(t *testing.T) {
	x := newExecTarget(t)
	x.cfg = func(c *topology.ExecSinkConfig) { c.RestartBackoff = topology.Duration(2 * time.Second) }
	s := x.openExec(t)
	evs := sinktest.Events(3)
	x.set(t, "down", "")
	for i, err := range execWrite(t, s, evs[:1]) {
		execWantTemporary(t, err, fmt.Sprintf("event %d as the worker exits", i))
	}
	start := time.Now()
	errs := execWrite(t, s, evs[1:])
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Write took %v while the sink waited to restart the worker", d)
	}
	for i, err := range errs {
		if !errors.Is(err, sink.ErrUnavailable) || sink.IsPermanent(err) {
			t.Errorf("event %d: want a temporary ErrUnavailable, got %v", i, err)
		}
		if d := sink.RetryDelay(err); d <= 0 || d > 2*time.Second {
			t.Errorf("event %d: RetryDelay %v, want the time left before the restart", i, d)
		}
	}
	x.SetDown(t, false)
	if err := execAllOK(execWrite(t, s, evs)); err != nil {
		t.Fatal(err)
	}
}

func TestExecSink_WorkerKilledMidBatch(t *testing.T) {
	x := newExecTarget(t)
	var logs execLogBuffer
	x.log = logs.logger()
	x.cfg = func(c *topology.ExecSinkConfig) { c.Timeout = topology.Duration(20 * time.Second) }
	s := x.openExec(t)
	x.SetDelay(t, 10*time.Second)
	evs := sinktest.Events(5)
	done := make(chan []error, 1)
	go func() { done <- execWrite(t, s, evs) }()
	execCheckFor(t, 10*time.Second, func() error {
		if x.received(t)[evs[0].ID] == 0 {
			return errors.New("the worker has not received the batch")
		}
		return nil
	})
	pids := x.pids(t)
	if len(pids) != 1 {
		t.Fatalf("%d workers started, want 1", len(pids))
	}
	p, err := os.FindProcess(pids[0])
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Write did not return after the worker was killed")
	}
	if d := time.Since(killed); d > 2*time.Second {
		t.Errorf("Write returned %v after the worker was killed", d)
	}
	for i, err := range errs {
		if !errors.Is(err, sink.ErrUnavailable) || sink.IsPermanent(err) {
			t.Errorf("event %d: want a temporary ErrUnavailable, got %v", i, err)
		}
	}
	x.SetDelay(t, 0)
	execCheckFor(t, 10*time.Second, func() error { return execAllOK(execWrite(t, s, evs)) })
	for _, ev := range evs {
		if x.Stored(t, ev.ID) != 1 {
			t.Errorf("event %s not stored", ev.ID)
		}
	}
	if len(logs.lines("worker exited", "exit_code=-1", "status=\"signal: killed\"")) != 1 {
		t.Errorf("the kill is not logged as one exit with its status:\n%s", logs.String())
	}
	if len(logs.lines("worker started")) != 2 {
		t.Errorf("want 2 starts logged:\n%s", logs.String())
	}
}

// A worker that cannot be started again (its command is gone) is logged
// and tried again after the restart delay, until it starts.
func TestExecSink_RestartFails(t *testing.T) {
	x := newExecTarget(t)
	var logs execLogBuffer
	x.log = logs.logger()
	link := filepath.Join(t.TempDir(), "worker")
	if err := os.Symlink(os.Args[0], link); err != nil {
		t.Skipf("cannot link the test binary: %v", err)
	}
	x.cfg = func(c *topology.ExecSinkConfig) { c.Command[0] = link }
	s := x.openExec(t)
	evs := sinktest.Events(2)
	if err := execAllOK(execWrite(t, s, evs[:1])); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	p, err := os.FindProcess(x.pids(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	execCheckFor(t, 10*time.Second, func() error {
		if len(logs.lines("level=ERROR", "cannot start worker", "retry_in=")) < 2 {
			return errors.New("two failed restarts not logged yet")
		}
		return nil
	})
	for i, err := range execWrite(t, s, evs) {
		if !errors.Is(err, sink.ErrUnavailable) || sink.IsPermanent(err) {
			t.Errorf("event %d while the worker cannot start: want a temporary ErrUnavailable, got %v", i, err)
		}
	}
	if err := os.Symlink(os.Args[0], link); err != nil {
		t.Fatal(err)
	}
	execCheckFor(t, 10*time.Second, func() error { return execAllOK(execWrite(t, s, evs)) })
}

// A worker that exits while a child of its own still holds its stdout and
// stderr is taken as exited all the same, and started again.
func TestExecSink_ChildHoldsOutput(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on PATH")
	}
	var logs execLogBuffer
	s, err := sink.NewExec(topology.ExecSinkConfig{
		Command:        []string{"sh", "-c", "sleep 2 & exit 3"},
		RestartBackoff: topology.Duration(50 * time.Millisecond),
	}, logs.logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	execCheckFor(t, 10*time.Second, func() error {
		if n := len(logs.lines("worker exited", "exit_code=3")); n < 2 {
			return fmt.Errorf("%d exits logged, want 2", n)
		}
		return nil
	})
	start := time.Now()
	for i, err := range execWrite(t, s, sinktest.Events(2)) {
		execWantTemporary(t, err, fmt.Sprintf("event %d", i))
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Write took %v", d)
	}
}

func TestExecSink_Stderr(t *testing.T) {
	x := newExecTarget(t)
	var logs execLogBuffer
	x.log = logs.logger()
	x.set(t, "stderr", "hello from the worker\n"+strings.Repeat("y", 10000)+"\nafter the long line\n")
	s := x.newExec(t)
	execCheckFor(t, 10*time.Second, func() error {
		if len(logs.lines("stream=stderr", ": started\"")) == 0 {
			return errors.New("the worker's last stderr line is not logged")
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hello from the worker", "after the long line"} {
		got := logs.lines("level=INFO", `msg="exec sink: worker stderr"`, "sink=exec", "stream=stderr", "line=\""+want+"\"")
		if len(got) != 1 {
			t.Errorf("stderr line %q: %d log lines, want 1:\n%s", want, len(got), logs.String())
		}
	}
	long := logs.lines("stream=stderr", "yyyy")
	if len(long) != 1 {
		t.Fatalf("the long stderr line: %d log lines, want 1", len(long))
	}
	if n := strings.Count(long[0], "y"); n != sink.ExecMaxStderrLine {
		t.Errorf("the long stderr line is logged with %d bytes, want %d", n, sink.ExecMaxStderrLine)
	}
	if !strings.Contains(long[0], "truncated=true") {
		t.Errorf("the cut line is not marked truncated: %s", long[0])
	}
	if len(logs.lines("worker exited", "exit_code=0")) != 1 {
		t.Errorf("the exit on Close is not logged with its code:\n%s", logs.String())
	}
}

func TestExecSink_Close(t *testing.T) {
	t.Run("idempotent", func(t *testing.T) {
		t.Parallel()
		x := newExecTarget(t)
		s := x.newExec(t)
		evs := sinktest.Events(1)
		if err := execAllOK(execWrite(t, s, evs)); err != nil {
			t.Fatal(err)
		}
		pid := x.pids(t)[0]
		for i := range 2 {
			if err := s.Close(); err != nil {
				t.Fatalf("Close %d: %v", i+1, err)
			}
		}
		execWantGone(t, pid)
		errs := execWrite(t, s, evs)
		execWantTemporary(t, errs[0], "Write after Close")
	})
	t.Run("worker ignores end of stdin", func(t *testing.T) {
		t.Parallel()
		x := newExecTarget(t)
		x.set(t, "ignore-eof", "")
		s := x.newExec(t)
		if err := execAllOK(execWrite(t, s, sinktest.Events(1))); err != nil {
			t.Fatal(err)
		}
		pid := x.pids(t)[0]
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < sink.ExecCloseGrace || d > sink.ExecCloseGrace+3*time.Second {
			t.Errorf("Close took %v, want about %v", d, sink.ExecCloseGrace)
		}
		execWantGone(t, pid)
	})
	t.Run("while a write waits", func(t *testing.T) {
		t.Parallel()
		x := newExecTarget(t)
		x.cfg = func(c *topology.ExecSinkConfig) { c.Timeout = topology.Duration(20 * time.Second) }
		s := x.newExec(t)
		x.SetDelay(t, time.Second)
		done := make(chan []error, 1)
		go func() { done <- execWrite(t, s, sinktest.Events(3)) }()
		execCheckFor(t, 10*time.Second, func() error {
			if len(x.received(t)) == 0 {
				return errors.New("the worker has received nothing")
			}
			return nil
		})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The worker finishes what it had read, then exits at the end of
		// its stdin: each event is done or temporarily failed.
		for i, err := range <-done {
			if err != nil && sink.IsPermanent(err) {
				t.Errorf("event %d: %v", i, err)
			}
		}
		execWantGone(t, x.pids(t)[0])
	})
}

// execWantGone fails the test if process pid still runs.
func execWantGone(t *testing.T, pid int) {
	t.Helper()
	p, err := os.FindProcess(pid)
	if err != nil {
		return
	}
	if err := p.Signal(syscall.Signal(0)); err == nil {
		t.Errorf("worker %d still runs", pid)
		p.Kill()
	}
}

func TestExecSink_Answers(t *testing.T) {
	t.Run("out of order", func(t *testing.T) {
		x := newExecTarget(t)
		x.set(t, "shuffle", "")
		s := x.openExec(t)
		evs := sinktest.Events(40)
		x.Refuse(t, evs[7].ID, true, 0)
		x.Refuse(t, evs[13].ID, false, 1)
		errs := execWrite(t, s, evs)
		for i, err := range errs {
			switch i {
			case 7:
				if !sink.IsPermanent(err) {
					t.Errorf("event 7: want a permanent failure, got %v", err)
				}
			case 13:
				execWantTemporary(t, err, "event 13")
			default:
				if err != nil {
					t.Errorf("event %d: %v", i, err)
				}
			}
		}
	})
	t.Run("same event twice in a batch", func(t *testing.T) {
		x := newExecTarget(t)
		s := x.openExec(t)
		evs := sinktest.Events(3)
		x.Refuse(t, evs[2].ID, true, 0)
		batch := []sink.Event{evs[0], evs[1], evs[0], evs[2], evs[0], evs[2]}
		errs := execWrite(t, s, batch)
		for i, err := range errs {
			if refused := batch[i].ID == evs[2].ID; refused != sink.IsPermanent(err) || !refused && err != nil {
				t.Errorf("position %d (%s): got %v", i, batch[i].ID, err)
			}
		}
		got := x.received(t)
		for _, ev := range evs {
			if got[ev.ID] != 1 {
				t.Errorf("event %s sent %d times, want once", ev.ID, got[ev.ID])
			}
		}
	})
	t.Run("unknown result", func(t *testing.T) {
		x := newExecTarget(t)
		s := x.openExec(t)
		evs := sinktest.Events(3)
		x.set(t, "refuse-"+sink.FileName(evs[1].ID), "weird")
		errs := execWrite(t, s, evs)
		if !errors.Is(errs[1], sink.ErrMalformed) || sink.IsPermanent(errs[1]) {
			t.Errorf("result \"maybe\": want a temporary ErrMalformed, got %v", errs[1])
		}
		if errs[0] != nil || errs[2] != nil {
			t.Errorf("the other events: %v, %v", errs[0], errs[2])
		}
		if n := len(x.pids(t)); n != 1 {
			t.Errorf("%d workers started, want 1: an unknown result is no protocol error", n)
		}
	})
	t.Run("answer not awaited", func(t *testing.T) {
		x := newExecTarget(t)
		var logs execLogBuffer
		x.log = logs.logger()
		x.set(t, "extra", "")
		s := x.openExec(t)
		evs := sinktest.Events(3)
		if err := execAllOK(execWrite(t, s, evs)); err != nil {
			t.Fatal(err)
		}
		if n := len(logs.lines("level=DEBUG", "not awaited", "event_id=not-awaited-")); n != 3 {
			t.Errorf("%d answers not awaited logged, want 3", n)
		}
		if n := len(x.pids(t)); n != 1 {
			t.Errorf("%d workers started, want 1", n)
		}
	})
	for _, how := range []string{"malformed", "oversize"} {
		t.Run(how+" restarts the worker at once", func(t *testing.T) {
			x := newExecTarget(t)
			x.cfg = func(c *topology.ExecSinkConfig) { c.RestartBackoff = topology.Duration(time.Hour) }
			s := x.openExec(t)
			evs := sinktest.Events(3)
			x.Garble(t, how)
			for i, err := range execWrite(t, s, evs) {
				if !errors.Is(err, sink.ErrMalformed) || sink.IsPermanent(err) {
					t.Errorf("event %d: want a temporary ErrMalformed, got %v", i, err)
				}
			}
			x.Garble(t, "")
			// No restart delay (it is an hour): the sink killed the worker.
			if err := execAllOK(execWrite(t, s, evs)); err != nil {
				t.Fatal(err)
			}
			if n := len(x.pids(t)); n != 2 {
				t.Errorf("%d workers started, want 2", n)
			}
		})
	}
}

func TestExecSink_Timeout(t *testing.T) {
	x := newExecTarget(t)
	var logs execLogBuffer
	x.log = logs.logger()
	x.cfg = func(c *topology.ExecSinkConfig) {
		c.Timeout = topology.Duration(time.Second)
		c.RestartBackoff = topology.Duration(time.Hour)
	}
	s := x.openExec(t)
	evs := sinktest.Events(3)
	x.SetDelay(t, 10*time.Second)
	start := time.Now()
	errs := execWrite(t, s, evs)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Write took %v with a timeout of 1s", d)
	}
	for i, err := range errs {
		if !errors.Is(err, sink.ErrUnavailable) || sink.IsPermanent(err) {
			t.Errorf("event %d: want a temporary ErrUnavailable, got %v", i, err)
		}
	}
	x.SetDelay(t, 0)
	// The worker was killed and started again at once: a worker that
	// exited would be started again after an hour. (Polled: a worker that
	// has just started under load may take longer than 1s to answer.)
	execCheckFor(t, 20*time.Second, func() error { return execAllOK(execWrite(t, s, evs)) })
	if n := len(logs.lines("worker started")); n < 2 {
		t.Errorf("%d workers started, want at least 2", n)
	}
	if n := len(logs.lines("level=WARN", "no result in time", "event_id="+evs[0].ID)); n < 1 {
		t.Errorf("the timeout is not logged with the event_id:\n%s", logs.String())
	}
}

// A ctx that ends while Write waits for answers returns at once; the
// worker is not killed for it.
func TestExecSink_CtxDoneWhileWaiting(t *testing.T) {
	x := newExecTarget(t)
	s := x.openExec(t)
	x.SetDelay(t, 500*time.Millisecond)
	evs := sinktest.Events(2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := s.Write(ctx, evs)
	if d := time.Since(start); d > time.Second {
		t.Errorf("Write returned %v after it started, with a ctx of 100ms", d)
	}
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) || sink.IsPermanent(err) {
			t.Errorf("event %d: want a temporary failure naming the deadline, got %v", i, err)
		}
	}
	x.SetDelay(t, 0)
	if err := execAllOK(execWrite(t, s, evs)); err != nil {
		t.Fatal(err)
	}
	if n := len(x.pids(t)); n != 1 {
		t.Errorf("%d workers started, want 1", n)
	}
}

// Only one Write at a time talks to the worker; a second one waits its
// turn, and gives up when its ctx ends.
func TestExecSink_OneWriteAtATime(t *testing.T) {
	x := newExecTarget(t)
	s := x.openExec(t)
	x.SetDelay(t, 300*time.Millisecond)
	a, b := sinktest.Events(2), sinktest.Events(2)
	done := make(chan []error, 1)
	go func() { done <- execWrite(t, s, a) }()
	execCheckFor(t, 10*time.Second, func() error {
		if len(x.received(t)) == 0 {
			return errors.New("the first Write has not reached the worker")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for i, err := range s.Write(ctx, b) {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("waiting Write, event %d: want the deadline, got %v", i, err)
		}
	}
	if err := execAllOK(<-done); err != nil {
		t.Fatal(err)
	}
	if err := execAllOK(execWrite(t, s, b)); err != nil {
		t.Fatal(err)
	}
}

func TestExecSink_ExampleShellWorker(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on PATH")
	}
	out := filepath.Join(t.TempDir(), "events")
	// The command as a config would give it: a path relative to Dir.
	s, err := sink.NewExec(topology.ExecSinkConfig{
		Command: []string{"./worker.sh", out},
		Dir:     filepath.Join("..", "examples", "exec"),
		Timeout: topology.Duration(10 * time.Second),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	evs := sinktest.Events(20)
	evs[3].Data = []byte("not json \x00\xff")
	if err := execAllOK(execWrite(t, s, evs)); err != nil {
		t.Fatal(err)
	}
	// A redelivery, with a duplicate, and an id the worker refuses.
	odd := sink.Event{ID: `a/b"c`, Subject: "events.test.odd", Data: []byte(`{}`)}
	again := append(append([]sink.Event{}, evs[:5]...), evs[0], odd)
	errs := execWrite(t, s, again)
	if err := execAllOK(errs[:6]); err != nil {
		t.Fatal(err)
	}
	if !sink.IsPermanent(errs[6]) {
		t.Errorf("event_id %q: want a permanent refusal, got %v", odd.ID, errs[6])
	}
	files, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(evs) {
		t.Errorf("%d files, want %d", len(files), len(evs))
	}
	for _, ev := range evs {
		b, err := os.ReadFile(filepath.Join(out, ev.ID+".json"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := sink.DecodeEvent(b)
		if err != nil || got.ID != ev.ID || !bytes.Equal(got.Data, ev.Data) {
			t.Errorf("event %s stored as %s", ev.ID, b)
		}
	}
}

func TestExecSink_ExamplePythonWorker(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH: the Python example worker is not tested")
	}
	db := filepath.Join(t.TempDir(), "events.db")
	s, err := sink.NewExec(topology.ExecSinkConfig{
		Command: []string{python, "worker.py", db},
		Dir:     filepath.Join("..", "examples", "exec"),
		Timeout: topology.Duration(10 * time.Second),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	evs := sinktest.Events(10)
	evs[4].Data = []byte(`[1,2,3]`) // not the JSON object the worker expects
	errs := execWrite(t, s, evs)
	for i, err := range errs {
		if i == 4 {
			if !sink.IsPermanent(err) {
				t.Errorf("event 4 (data not an object): want a permanent refusal, got %v", err)
			}
		} else if err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
	redelivery := append(append([]sink.Event{}, evs[:4]...), evs[0])
	if err := execAllOK(execWrite(t, s, redelivery)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, "-c",
		"import sqlite3, sys\nfor (i,) in sqlite3.connect(sys.argv[1]).execute('SELECT event_id FROM events'): print(i)",
		db).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(out))
	if len(got) != 9 {
		t.Errorf("%d rows, want 9: %q", len(got), got)
	}
	stored := make(map[string]bool)
	for _, id := range got {
		stored[id] = true
	}
	for i, ev := range evs {
		if stored[ev.ID] != (i != 4) {
			t.Errorf("event %d stored: %v", i, stored[ev.ID])
		}
	}
}

func BenchmarkExec(b *testing.B) {
	x := newExecTarget(b)
	x.set(b, "answer-only", "")
	s := x.openExec(b)
	evs := sinktest.Events(256)
	ctx := context.Background()
	for b.Loop() {
		if err := execAllOK(s.Write(ctx, evs)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
}

func TestExecSink_Box(t *testing.T) {
	t.Parallel() // each runs a system of its own, mostly waiting out an outage
	x := newExecTarget(t)
	x.cfg = func(c *topology.ExecSinkConfig) { c.Timeout = topology.Duration(3 * time.Second) }
	sinktest.RunBox(t, x, sinktest.BoxOptions{})
}
