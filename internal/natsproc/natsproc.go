//go:build unix

package natsproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// BinaryEnv names an existing nats-server binary to use instead of building one.
const BinaryEnv = "LEAFLINE_NATS_SERVER"

// module is the nats-server main package that go.mod pins.
const module = "github.com/nats-io/nats-server/v2"

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the path of a nats-server binary: BinaryEnv's, else one
// built with `go build` from the module cache on the first call (in a
// temporary directory that lives as long as the process; Cleanup removes
// it). dir is a directory inside this module, where go.mod pins the version.
func Binary(dir string) (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("natsproc: %s: %w", BinaryEnv, err)
		}
		return p, nil
	}
	buildOnce.Do(func() {
		tmp, err := os.MkdirTemp("", "leafline-nats-server-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(tmp, "nats-server")
		cmd := exec.Command("go", "build", "-o", buildPath, module)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("natsproc: go build %s: %w\n%s", module, err, out)
		}
	})
	return buildPath, buildErr
}

// Cleanup removes the binary Binary built, if any.
func Cleanup() {
	if buildPath != "" {
		os.RemoveAll(filepath.Dir(buildPath))
	}
}

// Server is one nats-server process started from a configuration file.
type Server struct {
	// Name is for messages only.
	Name string
	// Bin is the nats-server binary, Config its configuration file, Log
	// the file its output is appended to.
	Bin, Config, Log string
	// Addr is the client listener host:port, which Start waits for.
	Addr string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the process and waits until its client listener accepts
// connections, at most timeout.
func (s *Server) Start(timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("natsproc: %s is running", s.Name)
	}
	f, err := os.OpenFile(s.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.Bin, "-c", s.Config)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("natsproc: start %s: %w", s.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	return WaitListening(s.Addr, timeout, done)
}

// Kill sends SIGKILL and waits for the process to exit.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop sends SIGTERM (lame-duck free shutdown) and waits for the exit.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	<-s.done
	s.cmd, s.done = nil, nil
}

// Pid is the running process's id, or 0.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the process was started and has not exited.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// WaitListening waits until addr accepts a TCP connection, at most
// timeout, or until exited (may be nil) is closed: the process died.
func WaitListening(addr string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("natsproc: the process exited before listening on " + addr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natsproc: nothing listens on %s after %s", addr, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
