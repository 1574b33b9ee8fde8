//go:build unix

package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/sink/sinktest"
	"github.com/leafline/leafline/systest"
	"github.com/leafline/leafline/topology"
)

// execWorkerArg, as the test binary's first argument, makes it the test
// worker (see execTestWorker) instead of running the tests.
const execWorkerArg = "leafline-exec-test-worker"

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
		{"poison_after low", topology.ExecSinkConfig{Command: []string{"sh"}, PoisonAfter: 1}, "sink.exec.poison_after"},
		{"poison_after high", topology.ExecSinkConfig{Command: []string{"sh"}, PoisonAfter: 101}, "sink.exec.poison_after"},
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
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error {
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
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error {
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
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error { return execAllOK(execWrite(t, s, evs)) })
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
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error {
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
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error { return execAllOK(execWrite(t, s, evs)) })
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
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error {
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
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error {
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
		check.For(t, 10*time.Second, 20*time.Millisecond, func() error {
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
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error { return execAllOK(execWrite(t, s, evs)) })
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
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error {
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
	systest.RunSink(t, x, systest.SinkOptions{})
}
