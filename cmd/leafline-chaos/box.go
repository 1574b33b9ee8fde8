//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// box is one leafline process: its config, log, and the current process.
type box struct {
	c                 *system
	name, role        string
	cfgPath, logPath  string
	dataDir           string
	fileSinkDir       string // the file sink's directory; empty for another sink
	natsAddr, opsAddr string
	baseEnv           []string // environment of every (re)start
	// beforeStop, if set, runs before the driver stops the box (L1: bank
	// its counters).
	beforeStop func()

	// mu is held by a fault for as long as it acts on the box, so that
	// two faults never act on one box at once.
	mu sync.Mutex

	smu  sync.Mutex
	cur  *proc
	hold bool // a fault keeps the box stopped: do not restart it
	// recovering: a recover loop runs; deaths of the processes it starts
	// do not start another one.
	recovering bool
	starts     int    // processes started
	note       string // why the box may die now (e.g. "disk full"); recorded with an exit
	// sinkGone are the file sink's files (by name) that a replace or a
	// rollback destroyed with the data dir (see wipeDataDir).
	sinkGone map[string]bool
}

// proc is one OS process of a box.
type proc struct {
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has exited
	expected  atomic.Bool   // the driver stopped it
	ready     atomic.Bool
	paused    atomic.Bool
	env       []string
	logOffset int64
	started   time.Time
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// running returns the live process, or nil.
func (b *box) running() *proc {
	b.smu.Lock()
	defer b.smu.Unlock()
	if b.cur != nil && !b.cur.exited() {
		return b.cur
	}
	return nil
}

// Starts returns how many processes the box has had.
func (b *box) Starts() int {
	b.smu.Lock()
	defer b.smu.Unlock()
	return b.starts
}

// start starts a process with the given extra environment unless one is
// running, and waits until it is ready.
func (b *box) start(ctx context.Context, env []string) error {
	b.smu.Lock()
	if b.cur != nil && !b.cur.exited() {
		p := b.cur
		b.smu.Unlock()
		return b.waitReady(ctx, p, 90*time.Second)
	}
	if b.c.closing.Load() {
		b.smu.Unlock()
		return errors.New("the system is closing")
	}
	f, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.smu.Unlock()
		return err
	}
	off, _ := f.Seek(0, io.SeekEnd)
	fmt.Fprintf(f, "=== chaos: start #%d %s env=%q\n", b.starts+1, time.Now().Format(time.RFC3339Nano), env)
	cmd := exec.Command(b.c.bin, "run", "--config", b.cfgPath)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group (a terminal's Ctrl-C reaches the driver only, which
	// stops the boxes itself); die with the driver.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	f.Close()
	if err != nil {
		b.smu.Unlock()
		return fmt.Errorf("%s: start: %w", b.name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), env: env, logOffset: off, started: time.Now()}
	b.cur = p
	b.starts++
	b.smu.Unlock()
	b.c.bg.Add(1)
	go b.watch(p)
	return b.waitReady(ctx, p, 90*time.Second)
}

// cleanEnv is the driver's environment without failpoints.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEAFLINE_FAILPOINTS=") {
			out = append(out, kv)
		}
	}
	return out
}

// waitReady polls /readyz until the process is ready, exits or times out.
func (b *box) waitReady(ctx context.Context, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := "http://" + b.opsAddr + "/readyz"
	for {
		if p.ready.Load() {
			return nil
		}
		if code, _, err := httpGet(url); err == nil && code == http.StatusOK {
			p.ready.Store(true)
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s: exited before it was ready (%s); log:\n%s", b.name, p.cmd.ProcessState, b.logSince(p.logOffset, 15))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s; log:\n%s", b.name, timeout, b.logSince(p.logOffset, 15))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitRunning waits until the box has a ready process (restarted by the
// watcher or by a fault).
func (b *box) waitRunning(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p := b.running(); p != nil {
			if err := b.waitReady(ctx, p, time.Until(deadline)); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no ready process after %s", b.name, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watch waits for the process to exit. An exit the driver did not cause
// (a failpoint kill, a crash) is recorded and the box is restarted, the way
// a service manager would.
func (b *box) watch(p *proc) {
	defer b.c.bg.Done()
	_ = p.cmd.Wait()
	close(p.done)
	if p.expected.Load() || b.c.closing.Load() {
		return
	}
	tail := b.logSince(p.logOffset, 200)
	b.smu.Lock()
	note := b.note
	hold := b.hold
	b.smu.Unlock()
	if fp := failpointIn(tail); fp != "" {
		b.c.rec.Fault(faultFailpoint, fp+"@"+b.name, 0)
	} else if note != "" {
		b.c.rec.Info("%s exited during %s (%s); last log lines:\n%s", b.name, note, p.cmd.ProcessState, lastLines(tail, 6))
	} else {
		b.c.rec.Finding("%s exited by itself outside any fault (%s); last log lines:\n%s", b.name, p.cmd.ProcessState, lastLines(tail, 12))
	}
	b.smu.Lock()
	if hold || b.recovering {
		b.smu.Unlock()
		return
	}
	b.recovering = true
	b.smu.Unlock()
	b.c.bg.Add(1)
	go func() {
		defer b.c.bg.Done()
		defer func() {
			b.smu.Lock()
			b.recovering = false
			b.smu.Unlock()
		}()
		b.recover()
	}()
}

// recover restarts a box that died by itself, with backoff.
func (b *box) recover() {
	delay := 300 * time.Millisecond
	for attempt := 1; ; attempt++ {
		time.Sleep(delay)
		if b.c.closing.Load() {
			return
		}
		b.smu.Lock()
		hold := b.hold
		b.smu.Unlock()
		if hold {
			return
		}
		err := b.start(context.Background(), b.env())
		if err == nil || b.c.closing.Load() {
			return
		}
		if attempt == 1 || attempt%5 == 0 {
			b.c.rec.Info("%s: restart attempt %d failed: %s", b.name, attempt, firstLine(err.Error()))
		} else {
			b.c.rec.Debug("%s: restart attempt %d failed: %s", b.name, attempt, firstLine(err.Error()))
		}
		if attempt == 30 {
			select {
			case b.c.fatal <- fmt.Errorf("%s does not start any more: %w", b.name, err):
			default:
			}
			return
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// firstLine shortens a start error to its first line and the last line of
// the log tail it carries.
func firstLine(s string) string {
	first, rest, _ := strings.Cut(s, "\n")
	if lines := strings.Split(strings.TrimSpace(rest), "\n"); rest != "" {
		first += " … " + oneLine(lines[len(lines)-1])
	}
	return first
}

// stop stops the running process with sig, the driver's own doing: it is
// not restarted by the watcher. After timeout it is SIGKILLed. It returns
// once the process has exited.
func (b *box) stop(sig syscall.Signal, timeout time.Duration) {
	p := b.running()
	if p == nil {
		return
	}
	if b.beforeStop != nil && p.ready.Load() && !p.paused.Load() {
		b.beforeStop()
	}
	p.expected.Store(true)
	_ = p.cmd.Process.Signal(sig)
	if p.paused.Load() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// cont resumes a paused process.
func (b *box) cont() {
	if p := b.running(); p != nil && p.paused.Load() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		p.paused.Store(false)
	}
}

// env returns the environment of the box's next (re)start.
func (b *box) env() []string {
	b.smu.Lock()
	defer b.smu.Unlock()
	return b.baseEnv
}

func (b *box) setEnv(env []string) {
	b.smu.Lock()
	b.baseEnv = env
	b.smu.Unlock()
}

func (b *box) setHold(v bool) {
	b.smu.Lock()
	b.hold = v
	b.smu.Unlock()
}

func (b *box) setNote(s string) {
	b.smu.Lock()
	b.note = s
	b.smu.Unlock()
}

// logSince returns up to the last n lines of the box's log after offset.
func (b *box) logSince(offset int64, n int) string {
	f, err := os.Open(b.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = lines[len(lines)-n:]
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i := range lines {
		lines[i] = "    " + lines[i]
	}
	return strings.Join(lines, "\n")
}

// failpointIn returns the failpoint name of the last "failpoint NAME:
// SIGKILL" line in a log, or "".
func failpointIn(log string) string {
	name := ""
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(line, "failpoint "); ok {
			if n, _, ok := strings.Cut(rest, ": SIGKILL"); ok {
				name = n
			}
		}
	}
	return name
}

// readiness is the part of /readyz the driver reads.
type readiness struct {
	Ready             bool   `json:"ready"`
	Reason            string `json:"reason"`
	UpstreamConnected *bool  `json:"upstream_connected"`
}

func (b *box) readyz() (int, readiness, string, error) {
	code, body, err := httpGet("http://" + b.opsAddr + "/readyz")
	var r readiness
	if err == nil {
		_ = json.Unmarshal(body, &r)
	}
	return code, r, strings.TrimSpace(string(body)), err
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func httpGet(url string) (int, []byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, body, err
}
