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
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

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
//	crash-every     N: exit with status 5 when reading the Nth, 2Nth, …
//	                event since it started, without answering it
//	crash-on-<name> exit with status 5 when reading the event whose
//	                sink.FileName is <name>, without answering it
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
	seen := 0
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
		seen++
		if n, _ := strconv.Atoi(read("crash-every")); n > 0 && seen%n == 0 || has("crash-on-"+sink.FileName(ev.ID)) {
			return 5
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
	check.For(t, 45*time.Second, 20*time.Millisecond, func() error {
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
