package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/leafline/leafline/topology"
)

const (
	// ExecMaxResultLine is the longest line a worker may write on stdout,
	// without its newline. A longer line is a protocol error.
	ExecMaxResultLine = 1 << 20
	// ExecMaxStderrLine is how much of one stderr line is logged; the rest
	// of the line is dropped.
	ExecMaxStderrLine = 4 << 10
	// ExecCloseGrace is how long Close waits for the worker to exit once
	// its stdin is closed, before it kills it.
	ExecCloseGrace = 5 * time.Second

	// execMaxBackoff caps the restart delay, and execStableRun is how long
	// a worker must have run for the delay to start again from
	// RestartBackoff.
	execMaxBackoff = 30 * time.Second
	execStableRun  = 30 * time.Second
	// execDrainGrace is how long the sink keeps reading a worker's stdout
	// and stderr after the worker exited, for its last lines, before it
	// closes them: a child of the worker may still hold them open.
	execDrainGrace = time.Second
	// execChunk is the most bytes of event lines written to the worker's
	// stdin in one write; each event's timeout starts when its chunk is.
	execChunk = 64 << 10
)

var errExecClosed = fmt.Errorf("exec sink: %w", net.ErrClosed)

// ExecSink hands events to a worker process that it starts and supervises
// (sink.type "exec"). The worker is one long-running process speaking JSON
// lines on its stdin and stdout.
//
// # Worker
//
// The sink starts Command (Command[0] looked up in PATH; a relative path
// with a separator is taken relative to Dir) in Dir, with the box's
// environment, and keeps one instance running. The worker's stderr is
// logged line by line at Info ("exec sink: worker stderr", with the
// attributes sink=exec, stream=stderr, pid and line; a line longer than
// ExecMaxStderrLine (4 KiB) is cut there and marked truncated=true).
// Starts, exits (with the exit code) and restarts are logged too.
//
// # Request
//
// Each event is one line on the worker's stdin:
//
//	{"event_id":"…","subject":"…","origin_stream":"…","data":<payload>}\n
//
// with "data_base64":"<standard base64>" in place of data when the payload
// is not valid JSON (see EncodeEvent). A Write sends all its events' lines,
// then waits for their answers: the worker may work on several events at
// once. An event_id that appears twice in one Write is sent once, and both
// positions get its result. Only one Write talks to the worker at a time;
// another waits for its turn (or for its ctx to end).
//
// # Answer
//
// The worker answers each event with one line on stdout:
//
//	{"event_id":"…","result":"ok"|"retry"|"fail","error":"…"}\n
//
// in any order; the sink matches answers to events by event_id. ok means
// the work is durably done, fail a permanent refusal (the event is
// dead-lettered), retry a temporary failure; any other result is a
// temporary failure (ErrMalformed). Blank lines are skipped; other members
// of the object are ignored. An answer for an event_id that no Write is
// waiting for (a late one) is logged at Debug and ignored.
//
// A line that is not a JSON object with a string "event_id", or one longer
// than ExecMaxResultLine (1 MiB), is a protocol error: the answers can no
// longer be trusted to match, so every event waiting for one fails
// temporarily (ErrMalformed), and the worker is killed and started again
// at once.
//
// # Failures
//
// All of these are temporary failures of the events still waiting for an
// answer:
//
//   - No answer within Timeout of the event's line being written to stdin
//     (so Timeout includes the time a worker that has just started takes
//     to get ready): the event fails with ErrUnavailable, and the worker
//     is killed and started again at once (it may be stuck, and its late
//     answer could otherwise be taken for a later delivery's).
//   - The worker exits, or closes its stdout (it is then killed): a crash.
//     A worker that answered an event since it started is started again at
//     once, and the events it left unanswered go to the next one within
//     the same Write (see Poison events). One that answered nothing is
//     started again after a delay that starts at RestartBackoff, doubles
//     while workers keep exiting so, up to 30s, and starts again from
//     RestartBackoff once a worker has answered an event or run for 30s;
//     its events fail with ErrUnavailable. While the sink waits out that
//     delay, Write fails at once with ErrUnavailable (carrying the time
//     left as RetryAfter) rather than blocking. A worker that cannot be
//     started again is logged, and tried again after the next delay.
//   - The caller's ctx is done: Write returns at once. The worker keeps
//     running; an answer that comes later is ignored, or taken by a later
//     Write that sends the same event_id (an answer speaks for the event,
//     whichever delivery it came from). If ctx ended while a line was only
//     partly written, the worker is killed and started again at once.
//
// A worker must therefore be idempotent by event_id: an event it did (but
// whose answer was lost to a timeout, a crash or a restart) is sent again,
// and must be answered ok without being done twice.
//
// # Poison events
//
// An event that was in flight (its line written to the worker) at a crash
// is a suspect: it is sent again alone, after the events no crash points
// at, so that the next crash points at one event. An event in flight at
// PoisonAfter crashes in a row (3 unless configured) is a poison event:
// it fails permanently with ErrWorkerCrash, without being sent again, and
// the runner dead-letters it. A crash counts only while the worker answers
// other events between crashes: a worker that crashes whatever it is
// given is down, and its events fail temporarily however often they come.
// An answer for an event (whatever its result) clears its count.
//
// NOTE: a poison event that comes alone, with no other event for the
// worker to answer, is not found poison until other events come: until
// then it is retried like an event of a worker that is down.
//
// NOTE: a worker should exit when its stdin reaches end of file: that is
// how Close stops it. The sink kills only the worker process itself, not
// processes the worker started; a worker that starts others should stop
// them when it exits.
type ExecSink struct {
	cfg topology.ExecSinkConfig // with the defaults filled in
	log *slog.Logger
	// turn lets one Write at a time talk to the worker.
	turn chan struct{}
	// crashes finds the poison events.
	crashes *crashTracker
	count   Counters

	mu      sync.Mutex
	cur     *execWorker   // the running worker, or the one that just ended; nil while a restart is pending
	down    bool          // waiting out a restart delay
	startAt time.Time     // when that delay ends
	changed chan struct{} // closed and replaced when cur or down change, and at Close

	// gate refuses Writes after Close, which waits for those in flight
	// once the worker has stopped; gate.done() is closed by Close.
	gate      *writeGate
	superDone chan struct{} // closed when the supervisor has returned
}

// NewExec starts cfg's worker and returns a sink that writes to it. A
// command that cannot be started (not found, not executable) or a Dir that
// is not a directory is an error naming its config path; a worker that
// starts and then exits at once is not (the box starts while its target is
// down). A zero Timeout means 30s, a zero RestartBackoff 1s and a zero
// PoisonAfter 3.
func NewExec(cfg topology.ExecSinkConfig, log *slog.Logger) (*ExecSink, error) {
	return newExec(cfg, log, Counters{})
}

func newExec(cfg topology.ExecSinkConfig, log *slog.Logger, count Counters) (*ExecSink, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("sink.exec.command: required: the worker's argv")
	}
	if cfg.Dir != "" {
		if fi, err := os.Stat(cfg.Dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("sink.exec.dir: %s is not a directory", cfg.Dir)
		}
	}
	after, err := poisonAfter("sink.exec.poison_after", cfg.PoisonAfter)
	if err != nil {
		return nil, err
	}
	cfg.PoisonAfter = after
	if cfg.Timeout <= 0 {
		cfg.Timeout = topology.Duration(30 * time.Second)
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = topology.Duration(time.Second)
	}
	if log == nil {
		log = slog.Default()
	}
	s := &ExecSink{
		cfg:       cfg,
		log:       log.With("sink", "exec"),
		turn:      make(chan struct{}, 1),
		crashes:   newCrashTracker(after, count.TargetCrash),
		count:     count,
		changed:   make(chan struct{}),
		gate:      newWriteGate(),
		superDone: make(chan struct{}),
	}
	w, err := s.start()
	if err != nil {
		return nil, fmt.Errorf("sink.exec.command: %w", err)
	}
	s.cur = w
	go s.supervise(w)
	return s, nil
}

// Write sends evs to the worker and returns its answers, one per event (see
// ExecSink for the protocol).
func (s *ExecSink) Write(ctx context.Context, evs []Event) []error {
	errs := make([]error, len(evs))
	if len(evs) == 0 {
		return errs
	}
	if ctx.Err() != nil {
		return fill(errs, execCancelled(ctx))
	}
	if !s.gate.enter() {
		return fill(errs, errExecClosed)
	}
	defer s.gate.leave()
	select {
	case s.turn <- struct{}{}:
		defer func() { <-s.turn }()
	case <-ctx.Done():
		return fill(errs, execCancelled(ctx))
	}

	// One line per distinct event_id that encodes; sent[k] is the index
	// of the k-th line's event_id among the distinct ones.
	b := distinctIDs(evs)
	distinct := make([]error, len(b.ids))
	var ids []string
	var lines [][]byte
	var sent []int
	for j, i := range b.first {
		line, err := EncodeEvent(evs[i])
		if err != nil {
			distinct[j] = err
			continue
		}
		ids = append(ids, b.ids[j])
		lines = append(lines, append(line, '\n'))
		sent = append(sent, j)
	}
	results, pid := s.deliver(ctx, ids, lines)
	for k, j := range sent {
		distinct[j] = results[k]
	}
	for k := len(ids) - 1; k >= 0; k-- {
		if results[k] == nil {
			s.crashes.keep(ids[k], lines[k])
			break
		}
	}
	s.logOutcomes(ctx, pid, ids, results)
	return b.spread(distinct)
}

// deliver sends the distinct events ids (each with its line) to the worker
// in rounds, and returns their results and the pid of the last worker it
// used. Each round sends them in the crash tracker's order; a worker that
// crashes after it had answered an event is started again at once, and the
// events it left unanswered go to the next one in another round.
func (s *ExecSink) deliver(ctx context.Context, ids []string, lines [][]byte) ([]error, int) {
	res := make([]error, len(ids))
	left := make([]int, len(ids))
	for k := range left {
		left[k] = k
	}
	pid := 0
	probed := false
	for len(left) > 0 {
		w, err := s.worker(ctx)
		if err != nil {
			for _, k := range left {
				res[k] = err
			}
			break
		}
		pid = w.pid
		if id, line, ok := s.crashes.probe(ids); ok && !probed {
			// Its answer, whatever it is, confirms the crash; a crash on
			// it drops the crash, and the next round takes a new worker.
			probed = true
			s.exchange(ctx, w, []string{id}, [][]byte{line}, []int{0})
			continue
		}
		alone1, group, alone2 := s.crashes.plan(ids, left)
		var sends [][]int
		for _, k := range alone1 {
			sends = append(sends, []int{k})
		}
		if len(group) > 0 {
			sends = append(sends, group)
		}
		for _, k := range alone2 {
			sends = append(sends, []int{k})
		}
		left = nil
		for i, ks := range sends {
			if len(ks) == 1 && s.poisoned(ids[ks[0]], res, ks[0]) {
				continue
			}
			out, answered := s.exchange(ctx, w, ids, lines, ks)
			var unanswered []int
			var failed error
			for j, k := range ks {
				res[k] = out[j]
				if !answered[j] {
					unanswered = append(unanswered, k)
					failed = out[j]
				}
			}
			if failed == nil {
				continue
			}
			// The worker can no longer be used: what is left of the round
			// goes to the next worker, or fails as the last unanswered
			// event did.
			var rest []int
			for _, more := range sends[i+1:] {
				rest = append(rest, more...)
			}
			if ctx.Err() == nil && w.crashedWorking() {
				s.log.Debug("exec sink: the worker crashed; its unanswered events go to the next one",
					"pid", w.pid, "unanswered", len(unanswered), "unsent", len(rest))
				left = append(append(left, unanswered...), rest...)
				break
			}
			for _, k := range rest {
				res[k] = failed
			}
			for _, k := range unanswered {
				s.poisoned(ids[k], res, k)
			}
			return res, pid
		}
	}
	return res, pid
}

// exchange sends the events ids[k], k in ks, to w at once, and returns
// their results and which of them w answered.
func (s *ExecSink) exchange(ctx context.Context, w *execWorker, ids []string, lines [][]byte, ks []int) ([]error, []bool) {
	sub := make([]string, len(ks))
	ends := make([]int, len(ks))
	var buf []byte
	if len(ks) == 1 {
		buf = lines[ks[0]]
	}
	for j, k := range ks {
		sub[j] = ids[k]
		if len(ks) > 1 {
			buf = append(buf, lines[k]...)
		}
		if j > 0 {
			ends[j] = ends[j-1]
		}
		ends[j] += len(lines[k])
	}
	return w.exchange(ctx, sub, buf, ends, s.cfg.Timeout.D())
}

// poisoned sets res[k] to ErrWorkerCrash if ids[k] is a poison event, and
// reports whether it is.
func (s *ExecSink) poisoned(id string, res []error, k int) bool {
	bad, crashes := s.crashes.poisoned(id)
	if !bad {
		return false
	}
	s.log.Warn("exec sink: poison event: in flight at worker crashes in a row; it fails for good",
		"event_id", id, "crashes", crashes)
	res[k] = fmt.Errorf("exec sink: %w: the worker crashed %d times in a row with this event in flight", ErrWorkerCrash, crashes)
	return true
}

// logOutcomes logs each event's outcome, and one warning for the events
// that failed temporarily. The error text of a worker's result is never
// logged.
func (s *ExecSink) logOutcomes(ctx context.Context, pid int, ids []string, errs []error) {
	temporary := 0
	var firstErr error
	for k, id := range ids {
		switch err := errs[k]; {
		case err == nil:
			s.log.Debug("exec sink: delivered", "event_id", id)
		case errors.Is(err, ErrWorkerCrash):
			// Logged when it was found.
		case IsPermanent(err):
			s.log.Warn("exec sink: worker refused event", "event_id", id, "pid", pid)
		default:
			temporary++
			if firstErr == nil {
				firstErr = err
			}
			s.log.Debug("exec sink: delivery failed, to be retried", "event_id", id, "outcome", outcome(err))
		}
	}
	if temporary > 0 && ctx.Err() == nil {
		s.log.Warn("exec sink: events failed temporarily", "events", temporary, "distinct", len(ids),
			"pid", pid, "outcome", outcome(firstErr))
	}
}

// worker returns the running worker, waits for one that is being started
// (after a kill, which restarts it at once), or fails at once while the sink
// waits out a restart delay.
func (s *ExecSink) worker(ctx context.Context) (*execWorker, error) {
	limit := time.NewTimer(s.cfg.Timeout.D())
	defer limit.Stop()
	for {
		s.mu.Lock()
		w, down, startAt, changed := s.cur, s.down, s.startAt, s.changed
		s.mu.Unlock()
		// Close shuts the gate before it signals changed: a shut missed
		// here wakes the wait below.
		switch {
		case s.gate.isShut():
			return nil, errExecClosed
		case down:
			left := time.Until(startAt)
			return nil, RetryAfter(fmt.Errorf("%w: the worker is down; it is started again in %v",
				ErrUnavailable, left.Round(time.Millisecond)), left)
		case w != nil:
			if err, _ := w.failure(); err == nil {
				return w, nil
			}
			// It ended; the supervisor is about to wait out a delay, or to
			// start the next one.
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, execCancelled(ctx)
		case <-limit.C:
			return nil, fmt.Errorf("%w: no worker running after %v", ErrUnavailable, s.cfg.Timeout.D())
		}
	}
}

// Close stops the worker: it closes the worker's stdin, waits up to
// ExecCloseGrace for it to exit, then kills it; then it waits for the
// Writes in flight to return. Later Writes fail temporarily. Close is
// idempotent.
func (s *ExecSink) Close() error {
	s.gate.shut()
	s.mu.Lock()
	s.notifyLocked()
	s.mu.Unlock()
	<-s.superDone
	s.gate.wait()
	return nil
}

// notifyLocked wakes the Writes waiting for a change of state.
func (s *ExecSink) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *ExecSink) setState(w *execWorker, down bool, startAt time.Time) {
	s.mu.Lock()
	s.cur, s.down, s.startAt = w, down, startAt
	s.notifyLocked()
	s.mu.Unlock()
}

// supervise waits for each worker to end and starts the next one, until
// Close.
func (s *ExecSink) supervise(w *execWorker) {
	defer close(s.superDone)
	base := s.cfg.RestartBackoff.D()
	backoff := base
	for {
		select {
		case <-w.exited:
		case <-s.gate.done():
			s.shutdown(w)
			return
		}
		// A worker the sink killed, or one that answered an event, is
		// started again at once; one that exited without answering
		// anything waits out the backoff.
		var delay time.Duration
		switch _, end := w.failure(); {
		case end == execKilled:
		case w.answered.Load() > 0:
			backoff = base
		default:
			if w.ran >= execStableRun {
				backoff = base
			}
			delay, backoff = backoff, min(2*backoff, execMaxBackoff)
		}
		s.log.Info("exec sink: restarting worker", "restart_in", delay)
		for {
			if delay > 0 {
				s.setState(nil, true, time.Now().Add(delay))
				t := time.NewTimer(delay)
				select {
				case <-t.C:
				case <-s.gate.done():
					t.Stop()
					s.setState(nil, false, time.Time{})
					return
				}
			}
			s.setState(nil, false, time.Time{})
			select {
			case <-s.gate.done():
				return
			default:
			}
			nw, err := s.start()
			if err == nil {
				w = nw
				s.count.workerRestart()
				break
			}
			delay, backoff = backoff, min(2*backoff, execMaxBackoff)
			s.log.Error("exec sink: cannot start worker", "err", err, "retry_in", delay)
		}
		s.setState(w, false, time.Time{})
		// A Close that came while the worker was starting stops it at the
		// top of the loop.
	}
}

// shutdown closes w's stdin, waits up to ExecCloseGrace for it to exit,
// and kills it if it did not.
func (s *ExecSink) shutdown(w *execWorker) {
	w.closing.Store(true)
	w.stdin.Close()
	t := time.NewTimer(ExecCloseGrace)
	defer t.Stop()
	select {
	case <-w.exited:
	case <-t.C:
		s.log.Warn("exec sink: worker did not exit after its stdin closed; killing it",
			"pid", w.pid, "grace", ExecCloseGrace)
		w.fail(errExecClosed, execClosed)
		<-w.exited
	}
	s.setState(nil, false, time.Time{})
}
