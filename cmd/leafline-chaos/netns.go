//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leafline/leafline/internal/faultproxy"
)

// forwardCommand is the hidden subcommand that runs a TCP forwarder inside
// the network namespace.
const forwardCommand = "__forward"

// nsLink routes the edge1↔hub link through a network namespace:
//
//	edge1 → proxy (127.0.0.1) → forwarder in the namespace (nsIP) → veth →
//	host proxy (hostIP) → hub leafnode port (127.0.0.1)
//
// Taking the host end of the veth pair down drops every packet: open
// connections hang instead of being closed, the way a dead radio link or a
// dropped route looks to a leafnode (the proxy cut closes them instead).
// The addresses are link-local (169.254.x.y/30) on a veth pair that exists
// only on this host.
type nsLink struct {
	ipCmd        string
	ns, vh, vn   string
	hostIP, nsIP string
	entry        string // nsIP:port, where edge1's proxy dials
	hostProxy    *faultproxy.Proxy
	fwd          *exec.Cmd
	busy         atomic.Bool
	down         atomic.Bool
}

func newNSLink(ctx context.Context, hubLeaf string, seed uint64) (*nsLink, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("network namespaces need root")
	}
	ipCmd, err := exec.LookPath("ip")
	if err != nil {
		return nil, errors.New("the ip command (iproute2) is not installed")
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	id := os.Getpid() % 100000
	oct := 1 + id%250
	l := &nsLink{ipCmd: ipCmd, ns: fmt.Sprintf("lfchaos%d", id), vh: fmt.Sprintf("lfh%d", id), vn: fmt.Sprintf("lfn%d", id),
		hostIP: fmt.Sprintf("169.254.%d.1", oct), nsIP: fmt.Sprintf("169.254.%d.2", oct)}
	ok := false
	defer func() {
		if !ok {
			l.close()
		}
	}()
	if err := l.setUp(); err != nil {
		return nil, err
	}
	if err := l.startForwarder(ctx, exe, hubLeaf); err != nil {
		return nil, err
	}
	ok = true
	return l, nil
}

// setUp creates the namespace and the veth pair between it and the host.
func (l *nsLink) setUp() error {
	steps := [][]string{
		{"netns", "add", l.ns},
		{"link", "add", l.vh, "type", "veth", "peer", "name", l.vn},
		{"link", "set", l.vn, "netns", l.ns},
		{"addr", "add", l.hostIP + "/30", "dev", l.vh},
		{"link", "set", l.vh, "up"},
		{"netns", "exec", l.ns, "ip", "addr", "add", l.nsIP + "/30", "dev", l.vn},
		{"netns", "exec", l.ns, "ip", "link", "set", l.vn, "up"},
		{"netns", "exec", l.ns, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := l.ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// startForwarder listens on the host's end of the veth (a fault proxy to
// hubLeaf) and runs, inside the namespace, the forwarder that edge1 dials
// (l.entry); exe is the driver's binary.
func (l *nsLink) startForwarder(ctx context.Context, exe, hubLeaf string) error {
	// The veth comes up asynchronously; the host proxy binds hostIP.
	var (
		hp  *faultproxy.Proxy
		err error
	)
	for i := 0; i < 50; i++ {
		if hp, err = faultproxy.Listen(l.hostIP+":0", hubLeaf); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("listen on %s: %w", l.hostIP, err)
	}
	l.hostProxy = hp
	l.entry = l.nsIP + ":17422"
	cmd := exec.Command(l.ipCmd, "netns", "exec", l.ns, exe, forwardCommand, l.entry, hp.Addr())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	l.fwd = cmd
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case ready <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-ready:
		if line != "ready" {
			return fmt.Errorf("forwarder in %s: %s", l.ns, line)
		}
	case <-time.After(15 * time.Second):
		return fmt.Errorf("forwarder in %s did not start", l.ns)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (l *nsLink) ip(args ...string) error {
	out, err := exec.Command(l.ipCmd, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// cut takes the host end of the veth down: packets are dropped.
func (l *nsLink) cut() error {
	l.down.Store(true)
	return l.ip("link", "set", l.vh, "down")
}

// restore brings it back up (idempotent).
func (l *nsLink) restore() error {
	if !l.down.Load() {
		return nil
	}
	if err := l.ip("link", "set", l.vh, "up"); err != nil {
		return err
	}
	l.down.Store(false)
	return nil
}

func (l *nsLink) close() {
	if l.fwd != nil && l.fwd.Process != nil {
		_ = l.fwd.Process.Kill()
		_ = l.fwd.Wait()
	}
	if l.hostProxy != nil {
		l.hostProxy.Close()
	}
	_ = l.ip("netns", "del", l.ns) // deletes the veth pair with it
	_ = l.ip("link", "del", l.vh)
}

// runForward is the forwarder: "__forward LISTEN TARGET". It prints "ready"
// once it listens and runs until killed.
func runForward(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chaos __forward LISTEN TARGET")
		return exitUsage
	}
	p, err := faultproxy.Listen(args[0], args[1])
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer p.Close()
	fmt.Println("ready")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return 0
}
