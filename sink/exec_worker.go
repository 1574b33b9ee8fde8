package sink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// execWorker is one run of the worker process.
type execWorker struct {
	cmd     *exec.Cmd
	pid     int
	stdin   io.WriteCloser
	started time.Time
	log     *slog.Logger
	crashes *crashTracker
	// answered counts the awaited answers the worker wrote.
	answered atomic.Int64
	// closing is set when Close closes the worker's stdin: its exit is
	// then no crash.
	closing atomic.Bool

	mu      sync.Mutex
	pending map[string]execCall // the events waiting for an answer
	err     error               // why the worker can no longer be used
	end     execEnd             // how it ended (set with err)
	dead    chan struct{}       // closed when err is set

	exited chan struct{} // closed once the process was waited for and its output read
	ran    time.Duration // how long the process ran; set before exited closes
}

// execEnd is how a worker ended.
type execEnd int

const (
	// execExited: it exited, or closed its stdout or stdin, by itself (a
	// crash).
	execExited execEnd = iota
	// execKilled: the sink killed it (no answer in time, a protocol
	// error, a write cut short); the next one is started at once.
	execKilled
	// execClosed: Close stopped it.
	execClosed
)

// execCall is where the answer for one event of a Write goes.
type execCall struct {
	k       int // the event's index among the exchange's events
	answers chan<- execAnswer
	sent    bool // its line is written, or being written: it is in flight
}

type execAnswer struct {
	k   int
	res Result
}

// start starts a worker process and the goroutines that read its stdout
// and stderr and wait for it.
func (s *ExecSink) start() (*execWorker, error) {
	cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
	cmd.Dir = s.cfg.Dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// The sink's own pipes for stdout and stderr (not StdoutPipe), so that
	// Wait does not close them before their last lines are read.
	outR, outW, err := os.Pipe()
	if err != nil {
		stdin.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		stdin.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		stdin.Close()
		outR.Close()
		errR.Close()
		return nil, err
	}
	w := &execWorker{
		cmd:     cmd,
		pid:     cmd.Process.Pid,
		stdin:   stdin,
		started: time.Now(),
		crashes: s.crashes,
		pending: make(map[string]execCall),
		dead:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
	w.log = s.log.With("pid", w.pid)
	w.log.Info("exec sink: worker started", "command", s.cfg.Command[0])
	outDone := make(chan struct{})
	errDone := make(chan struct{})
	go func() {
		defer close(outDone)
		w.readAnswers(outR)
	}()
	go func() {
		defer close(errDone)
		w.logStderr(errR)
	}()
	go w.wait(outR, outDone, errR, errDone)
	return w, nil
}

// wait waits for the process to exit, then for its stdout and stderr to be
// read to their end (or closes them after execDrainGrace), and closes
// w.exited. The worker is marked dead once its stdout is read to its end
// (or the grace is over): an answer it wrote before it exited is taken.
func (w *execWorker) wait(outR *os.File, outDone chan struct{}, errR *os.File, errDone chan struct{}) {
	werr := w.cmd.Wait()
	w.ran = time.Since(w.started)
	status := "unknown"
	code := -1
	if st := w.cmd.ProcessState; st != nil {
		status, code = st.String(), st.ExitCode()
	} else if werr != nil {
		status = werr.Error()
	}
	t := time.NewTimer(execDrainGrace)
	expired := false
	select {
	case <-outDone:
	case <-t.C:
		expired = true
	}
	end := execExited
	if w.closing.Load() {
		end = execClosed
	}
	w.fail(fmt.Errorf("%w: the worker exited (%s)", ErrUnavailable, status), end)
	for _, p := range []struct {
		r    *os.File
		done chan struct{}
	}{{outR, outDone}, {errR, errDone}} {
		if !expired {
			select {
			case <-p.done:
			case <-t.C:
				expired = true
			}
		}
		p.r.Close() // unblocks a read of a pipe that a child of the worker holds
		<-p.done
	}
	t.Stop()
	level := slog.LevelInfo
	if code != 0 {
		level = slog.LevelWarn
	}
	w.log.Log(context.Background(), level, "exec sink: worker exited",
		"exit_code", code, "status", status, "ran", w.ran.Round(time.Millisecond))
	close(w.exited)
}

// fail marks the worker as no longer usable for reason (the first reason
// wins), which fails every event waiting for an answer. A crash
// (execExited) is told to the crash tracker with the events in flight at
// it, before any Write sees the worker dead. execKilled and execClosed
// also kill the process; the supervisor starts the next worker without a
// delay after execKilled.
func (w *execWorker) fail(reason error, end execEnd) {
	w.mu.Lock()
	if w.err == nil {
		w.err, w.end = reason, end
		if end == execExited {
			var inFlight []string
			for id, c := range w.pending {
				if c.sent {
					inFlight = append(inFlight, id)
				}
			}
			w.crashes.crashed(inFlight)
		} else {
			w.crashes.lapse()
		}
		close(w.dead)
	}
	w.mu.Unlock()
	if end != execExited {
		w.kill()
	}
}

// kill kills the process; the wait that follows marks it dead.
func (w *execWorker) kill() {
	w.cmd.Process.Kill() // an error means it has exited already
}

// failure returns why the worker can no longer be used (nil while it can),
// and how it ended.
func (w *execWorker) failure() (error, execEnd) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err, w.end
}

// crashedWorking reports whether the worker crashed after it had answered
// an event: the supervisor starts the next one at once, and a Write sends
// it the events this one left unanswered.
func (w *execWorker) crashedWorking() bool {
	err, end := w.failure()
	return err != nil && end == execExited && w.answered.Load() > 0
}

// readAnswers reads the worker's stdout and hands each answer to the Write
// waiting for it.
func (w *execWorker) readAnswers(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte // a line longer than br's buffer, so far
	for {
		frag, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(long)+len(frag) > ExecMaxResultLine+2 { // room for "\r\n"
				w.log.Warn("exec sink: the worker wrote an oversize line; restarting it", "limit", ExecMaxResultLine)
				w.fail(fmt.Errorf("%w: the worker wrote a line longer than %d bytes", ErrMalformed, ExecMaxResultLine), execKilled)
				return
			}
			long = append(long, frag...)
			continue
		}
		if err != nil {
			// End of file, or a read error: no answer can come any more. A
			// last line without its newline is dropped (the worker died
			// while writing it). A worker that closed its stdout and still
			// runs is of no use: it is killed, and its wait marks it dead.
			w.kill()
			return
		}
		line := frag
		if long != nil {
			line = append(long, frag...)
			long = nil
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) > ExecMaxResultLine {
			w.log.Warn("exec sink: the worker wrote an oversize line; restarting it", "limit", ExecMaxResultLine)
			w.fail(fmt.Errorf("%w: the worker wrote a line longer than %d bytes", ErrMalformed, ExecMaxResultLine), execKilled)
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		res, err := execParseResult(line)
		if err != nil {
			w.log.Warn("exec sink: the worker wrote a line that is not a result; restarting it", "problem", err)
			w.fail(fmt.Errorf("%w: the worker wrote a line that is not a result: %v", ErrMalformed, err), execKilled)
			return
		}
		w.crashes.answer(res.EventID)
		w.mu.Lock()
		c, ok := w.pending[res.EventID]
		if ok {
			delete(w.pending, res.EventID)
		}
		w.mu.Unlock()
		if !ok {
			w.log.Debug("exec sink: ignored a result for an event not awaited", "event_id", res.EventID)
			continue
		}
		w.answered.Add(1)
		c.answers <- execAnswer{c.k, res} // buffered for every event of the Write
	}
}

// execParseResult decodes one answer line: a JSON object with a string
// event_id (which may be empty).
func execParseResult(line []byte) (Result, error) {
	var r struct {
		EventID *string `json:"event_id"`
		Result  string  `json:"result"`
		Error   string  `json:"error"`
	}
	if err := json.Unmarshal(line, &r); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return Result{}, fmt.Errorf("%s has the wrong type", ute.Field)
		}
		return Result{}, errors.New("not a JSON object")
	}
	if r.EventID == nil {
		return Result{}, errors.New("no event_id")
	}
	return Result{EventID: *r.EventID, Result: r.Result, Error: r.Error}, nil
}

// logStderr logs the worker's stderr, one line per record, cut to
// ExecMaxStderrLine bytes.
func (w *execWorker) logStderr(r io.Reader) {
	br := bufio.NewReaderSize(r, ExecMaxStderrLine)
	for {
		frag, err := br.ReadSlice('\n')
		cut := err == bufio.ErrBufferFull
		line := bytes.TrimSuffix(bytes.TrimSuffix(frag, []byte("\n")), []byte("\r"))
		if len(line) > 0 {
			attrs := []any{"stream", "stderr", "line", string(line)}
			if cut {
				attrs = append(attrs, "truncated", true)
			}
			w.log.Info("exec sink: worker stderr", attrs...)
		}
		for err == bufio.ErrBufferFull { // drop the rest of a long line
			_, err = br.ReadSlice('\n')
		}
		if err != nil {
			return
		}
	}
}

// exchange writes the lines of some distinct events (ids[k] ends at
// lines[ends[k]]) and waits for their answers. It returns one error per
// event of ids, and which of them the worker answered.
func (w *execWorker) exchange(ctx context.Context, ids []string, lines []byte, ends []int, timeout time.Duration) ([]error, []bool) {
	n := len(ids)
	if n == 0 {
		return nil, nil
	}
	x := &execExchange{w: w, ids: ids, timeout: timeout, answers: make(chan execAnswer, n),
		res: make([]error, n), got: make([]bool, n), deadline: make([]time.Time, n), armed: -1}
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return fill(x.res, err), x.got
	}
	for k, id := range ids {
		w.pending[id] = execCall{k: k, answers: x.answers}
	}
	w.mu.Unlock()
	defer w.forget(ids, x.answers)

	quit := make(chan struct{})
	defer close(quit)
	x.progress, x.wrote, x.writing = make(chan execSent), make(chan error, 1), true
	go w.writeLines(lines, ends, x.progress, x.wrote, quit)
	x.timer = time.NewTimer(timeout)
	x.timer.Stop()
	defer x.timer.Stop()
	if res, done := x.await(ctx); done {
		return res, x.got
	}
	x.finishWriting(ctx)
	return x.res, x.got
}

// execExchange is the state of one exchange: which events have their
// answer, which lines are written and since when, and the writer's state.
type execExchange struct {
	w        *execWorker
	ids      []string
	timeout  time.Duration
	answers  chan execAnswer
	res      []error
	got      []bool
	deadline []time.Time // set once the event's line is being written
	sent     int         // lines written, or being written
	oldest   int         // the oldest event without an answer
	armed    int         // the event the timer is set for, or -1
	timer    *time.Timer
	progress chan execSent
	wrote    chan error
	writing  bool
}

// await waits until every event has its answer (done false: the writer
// may still be running), or the worker dies, an answer is overdue or ctx
// ends (done true, with every event's outcome).
func (x *execExchange) await(ctx context.Context) (res []error, done bool) {
	for left := len(x.ids); left > 0; {
		x.arm()
		select {
		case a := <-x.answers:
			if !x.got[a.k] {
				x.got[a.k], x.res[a.k] = true, a.res.Err()
				left--
			}
		case p := <-x.progress:
			for k := x.sent; k < p.upTo; k++ {
				x.deadline[k] = p.at.Add(x.timeout)
			}
			x.w.markSent(x.ids[x.sent:p.upTo], x.answers)
			x.sent = p.upTo
		case err := <-x.wrote:
			x.writing, x.wrote = false, nil
			x.writeFailed(err)
		case <-x.w.dead:
			reason, _ := x.w.failure()
			return x.settle(func(int) error { return reason }), true
		case now := <-x.timer.C:
			return x.overdue(now), true
		case <-ctx.Done():
			if x.writing {
				x.cutShort()
			}
			cerr := execCancelled(ctx)
			return x.settle(func(int) error { return cerr }), true
		}
	}
	return nil, false
}

// arm sets the timer for the oldest unanswered event that was written:
// lines are written in order, so it has the nearest deadline.
func (x *execExchange) arm() {
	for x.oldest < len(x.ids) && x.got[x.oldest] {
		x.oldest++
	}
	switch {
	case x.oldest < x.sent && x.armed != x.oldest:
		x.timer.Reset(time.Until(x.deadline[x.oldest]))
		x.armed = x.oldest
	case x.oldest >= x.sent && x.armed >= 0:
		x.timer.Stop() // every event written so far has its answer
		x.armed = -1
	}
}

// overdue restarts the worker because the oldest written event had no
// answer in time, and settles the exchange.
func (x *execExchange) overdue(now time.Time) []error {
	timeout := x.timeout
	timedOut := fmt.Errorf("%w: no result within %v", ErrUnavailable, timeout)
	x.w.log.Warn("exec sink: no result in time; restarting the worker", "event_id", x.ids[x.oldest], "timeout", timeout)
	x.w.fail(fmt.Errorf("%w: event %s had no result within %v", ErrUnavailable, x.ids[x.oldest], timeout), execKilled)
	return x.settle(func(k int) error {
		if k < x.sent && !now.Before(x.deadline[k]) {
			return timedOut
		}
		return fmt.Errorf("%w: the worker was restarted: another event had no result within %v", ErrUnavailable, timeout)
	})
}

// settle fills the events still without an answer: with an answer that
// already arrived, or else with err.
func (x *execExchange) settle(err func(k int) error) []error {
	for drained := false; !drained; {
		select {
		case a := <-x.answers:
			if !x.got[a.k] {
				x.got[a.k], x.res[a.k] = true, a.res.Err()
			}
		default:
			drained = true
		}
	}
	for k := range x.res {
		if !x.got[k] {
			x.res[k] = err(k)
		}
	}
	return x.res
}

// finishWriting waits, once every event has its answer, for the writer to
// return: the worker may have answered lines it had not read yet, and the
// next Write must not write while it does.
func (x *execExchange) finishWriting(ctx context.Context) {
	if !x.writing {
		return
	}
	t := time.NewTimer(x.timeout)
	defer t.Stop()
	for x.writing {
		select {
		case <-x.progress:
		case err := <-x.wrote:
			x.writing = false
			x.writeFailed(err)
		case <-t.C:
			x.writing = false
			x.w.log.Warn("exec sink: the worker does not read its stdin; restarting it")
			x.w.fail(fmt.Errorf("%w: the worker does not read its stdin", ErrUnavailable), execKilled)
		case <-ctx.Done():
			x.writing = false
			x.cutShort()
		}
	}
}

// writeFailed kills a worker whose stdin cannot be written (it exited,
// or closed its stdin): its exit is a crash, marked by its wait once its
// last answers are read.
func (x *execExchange) writeFailed(err error) {
	if err != nil {
		x.w.log.Warn("exec sink: cannot write to the worker; killing it", "err", err)
		x.w.kill()
	}
}

// cutShort restarts the worker after a cancelled write: a line may be
// half written, so its stdin cannot be used again.
func (x *execExchange) cutShort() {
	x.w.log.Warn("exec sink: write cancelled while the worker was reading it; restarting the worker")
	x.w.fail(fmt.Errorf("%w: a write to the worker was cut short", ErrUnavailable), execKilled)
}

// execSent says the lines of the events before upTo are written (or being
// written) since at.
type execSent struct {
	upTo int
	at   time.Time
}

// writeLines writes lines to the worker's stdin in chunks of about
// execChunk bytes, reporting each chunk on progress before it is written,
// and the outcome on wrote.
func (w *execWorker) writeLines(lines []byte, ends []int, progress chan<- execSent, wrote chan<- error, quit <-chan struct{}) {
	start, k := 0, 0
	for k < len(ends) {
		j := k + 1
		for j < len(ends) && ends[j]-start <= execChunk {
			j++
		}
		select {
		case progress <- execSent{upTo: j, at: time.Now()}:
		case <-quit:
			wrote <- nil
			return
		}
		if _, err := w.stdin.Write(lines[start:ends[j-1]]); err != nil {
			wrote <- err
			return
		}
		start, k = ends[j-1], j
	}
	wrote <- nil
}

// markSent marks ids, waiting for answers, as in flight.
func (w *execWorker) markSent(ids []string, answers chan execAnswer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if c, ok := w.pending[id]; ok && c.answers == answers {
			c.sent = true
			w.pending[id] = c
		}
	}
}

// forget stops waiting for the answers of ids that went to answers.
func (w *execWorker) forget(ids []string, answers chan execAnswer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if c, ok := w.pending[id]; ok && c.answers == answers {
			delete(w.pending, id)
		}
	}
}

func execCancelled(ctx context.Context) error {
	return fmt.Errorf("%w: exec sink: %w", ErrUnavailable, context.Cause(ctx))
}
