//go:build linux

// Package receiver is the http sink's target of a chaos run with --sink
// http: a process of its own (the driver's binary run with Command) that
// keeps each event as the file sink does, and that the kill fault kills
// and starts again like a box. Run exits 2 on usage errors and 4 when it
// cannot serve, the driver's exit codes.
package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/sink"
)

// Command is the hidden subcommand that runs the http sink's
// target: `__receive ADDR DIR`.
const Command = "__receive"

// Run serves the http sink's batch protocol on ADDR and keeps each
// event as a file in DIR through the file sink: fsynced before the answer,
// idempotent by event_id. It is the "user's service" of a chaos run with
// --sink http, and the kill fault kills it like a box.
func Run(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: __receive ADDR DIR")
		return 2
	}
	fs, err := sink.NewFileSink(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	srv := &http.Server{Handler: receiveHandler(fs), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(os.Stderr, "receiver: listening on %s, storing under %s\n", ln.Addr(), args[1])
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return 4
}

func receiveHandler(fs *sink.FileSink) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		var body struct {
			Events []json.RawMessage `json:"events"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&body); err != nil {
			http.Error(w, "bad batch: "+err.Error(), http.StatusBadRequest)
			return
		}
		evs := make([]sink.Event, 0, len(body.Events))
		results := make([]sink.Result, len(body.Events))
		for i, raw := range body.Events {
			ev, err := sink.DecodeEvent(raw)
			if err != nil {
				results[i] = sink.Result{Result: sink.ResultFail, Error: err.Error()}
				continue
			}
			results[i].EventID = ev.ID
			evs = append(evs, ev)
		}
		errs := fs.Write(r.Context(), evs)
		j := 0
		for i := range results {
			if results[i].Result != "" {
				continue
			}
			results[i].Result = sink.ResultOK
			if err := errs[j]; err != nil {
				results[i].Result, results[i].Error = sink.ResultRetry, err.Error()
			}
			j++
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
	})
}

// Receiver runs the __receive process and restarts it after a kill.
type Receiver struct {
	exe, addr, dir, logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	busy bool
}

// Start starts the receiver of exe (a program that runs Run on Command)
// on addr, storing under dir, its output appended to logPath.
func Start(ctx context.Context, exe, addr, dir, logPath string) (*Receiver, error) {
	r := &Receiver{exe: exe, addr: addr, dir: dir, logPath: logPath}
	return r, r.start(ctx)
}

func (r *Receiver) start(ctx context.Context) error {
	log, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(r.exe, Command, r.addr, r.dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start receiver: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("receiver exited at start (see %s)", r.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("receiver not listening on %s after 10s: %w", r.addr, err)
		}
	}
}

// Kill SIGKILLs the receiver, waits down, and starts it again. It reports
// false when a kill is already under way.
func (r *Receiver) Kill(ctx context.Context, down time.Duration) (bool, error) {
	r.mu.Lock()
	if r.busy {
		r.mu.Unlock()
		return false, nil
	}
	r.busy = true
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.busy = false; r.mu.Unlock() }()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	ctxsleep.For(ctx, down)
	return true, r.start(context.WithoutCancel(ctx))
}

// Close kills the receiver for good.
func (r *Receiver) Close() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// Holds reports whether the receiver stored the event.
func (r *Receiver) Holds(id string) (bool, error) { return HoldsFile(r.dir, id) }

// HoldsFile reports whether dir holds the file sink's file of the event
// (the receiver stores events as the file sink does).
func HoldsFile(dir, id string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, sink.FileName(id)))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}
