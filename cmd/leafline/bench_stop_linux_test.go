package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"
)

// `leafline bench` is stopped by SIGTERM or Ctrl-C (SIGINT) in any phase:
// the process exits non-zero, its servers stop listening, its edge process
// (phase r) is gone and its temp dir is removed. Each case runs at a tiny
// size, stopped in a phase that would run on for minutes.
//
// The 5 s the bench promises are bounded by its stop constants (see
// TestLeafline_StopWithin5s in package bench); here a bench still running
// after stopHang has hung, and the time each took is logged.
func TestBench_SignalStopsEveryPhase(t *testing.T) {
	const stopHang = 20 * time.Second
	bin := buildBinary(t)
	for _, c := range []struct {
		name string
		args []string
		sig  syscall.Signal
		// ready reports that the run is inside the phase to stop, and
		// settle is how long it then runs on before the signal.
		ready  func(pid int, listening []int, out string) bool
		settle time.Duration
	}{
		{"k/no-server", []string{"--only", "k", "--backlog", "5000000"}, syscall.SIGTERM,
			func(_ int, _ []int, out string) bool { return strings.Contains(out, "bench: phases=") }, time.Second},
		{"e/end-to-end", []string{"--only", "e", "--e2e", "200000"}, syscall.SIGTERM,
			func(_ int, l []int, _ string) bool { return len(l) >= 4 }, 2 * time.Second},
		{"d/preload", []string{"--only", "d", "--backlog", "200000"}, syscall.SIGINT,
			func(_ int, l []int, _ string) bool { return len(l) >= 4 }, 2 * time.Second},
		{"l/link-cut", []string{"--only", "l", "--cuts", "1", "--cut-for", "10m", "--restore-rate", "10"}, syscall.SIGINT,
			// The edge's link is cut for 10 minutes a second or two in.
			func(_ int, l []int, _ string) bool { return len(l) >= 4 }, 3 * time.Second},
		{"F/fleet-cut", []string{"--only", "F", "--fleet-edges", "3", "--fleet-events", "20", "--fleet-cut", "10m", "--transport", "relay"}, syscall.SIGTERM,
			// The edges' links are cut for 10 minutes a few seconds in.
			func(_ int, l []int, _ string) bool { return len(l) >= 5 }, 6 * time.Second},
		{"r/edge-process", []string{"--only", "r", "--rss", "30000"}, syscall.SIGTERM,
			func(pid int, _ []int, _ string) bool { return len(children(pid)) > 0 }, 300 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			cmd := exec.Command(bin, append([]string{"bench", "--insecure", "--unsigned"}, c.args...)...)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			var out, errb syncBuf
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				for _, p := range children(cmd.Process.Pid) {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			})
			pid := cmd.Process.Pid
			var ports []int
			var kids []int
			check.For(t, 40*time.Second, 50*time.Millisecond, func() error {
				select {
				case err := <-exited:
					t.Fatalf("bench exited before the phase began: %v\n%s\n%s", err, out.String(), errb.String())
				default:
				}
				kids = children(pid)
				ports = listeningPorts(append([]int{pid}, kids...)...)
				if !c.ready(pid, ports, out.String()) {
					return fmt.Errorf("not in the phase yet: listening on %v, children %v", ports, kids)
				}
				return nil
			})
			time.Sleep(c.settle)
			kids = children(pid)
			ports = listeningPorts(append([]int{pid}, kids...)...)
			sent := time.Now()
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				took := time.Since(sent)
				t.Logf("%s: exited %s after %v (%v); was listening on %d ports, %d child processes", c.name, took.Round(10*time.Millisecond), c.sig, err, len(ports), len(kids))
				if err == nil {
					t.Errorf("bench exited 0 after %v", c.sig)
				}
			case <-time.After(stopHang):
				t.Fatalf("bench still running %v after %v\nstdout:\n%s\nstderr:\n%s", stopHang, c.sig, out.String(), errb.String())
			}
			if !strings.Contains(errb.String(), "stopped") {
				t.Errorf("stderr does not say the bench was stopped:\n%s", errb.String())
			}
			for _, p := range kids {
				check.For(t, 2*time.Second, 20*time.Millisecond, func() error {
					if err := syscall.Kill(p, 0); err == nil {
						return fmt.Errorf("child process %d still runs", p)
					}
					return nil
				})
			}
			for _, port := range ports {
				if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond); err == nil {
					c.Close()
					t.Errorf("port %d still accepts connections after the bench exited", port)
				}
			}
			left, err := os.ReadDir(tmp)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range left {
				t.Errorf("the bench left %s in its temp dir", filepath.Join(tmp, e.Name()))
			}
		})
	}
}

// syncBuf is a bytes.Buffer that a process writes while the test reads.
type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// listeningPorts lists the TCP ports the processes pids listen on.
func listeningPorts(pids ...int) []int {
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			l, err := os.Readlink(fd)
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	var ports []int
	for _, tab := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(tab)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// sl local_address rem_address st … inode (field 9)
			if len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports = append(ports, int(p))
			}
		}
		f.Close()
	}
	return ports
}
