// Package faultproxy is a TCP proxy that can cut the link it carries, for
// link-cut tests, the demo and the chaos driver. While cut it closes every
// open connection and every new one at once, as a dead link or a dropped
// route does to a leafnode. It can also stall the link: the connections
// stay open and every byte is dropped, as on a link that silently loses
// packets, where the ends have nothing to notice.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards TCP connections from its listener to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu                 sync.Mutex
	cut                bool
	stallable, stalled atomic.Bool
	conns              map[net.Conn]struct{}
	wg                 sync.WaitGroup

	count                atomic.Bool
	toTarget, fromTarget atomic.Int64
}

// Listen starts a proxy on addr (e.g. "127.0.0.1:0") forwarding to target.
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// CountBytes makes the proxy count the bytes of the connections it
// accepts from now on (see Bytes). It is off by default: counting copies
// through a buffer, where an uncounted connection is spliced in the
// kernel.
func (p *Proxy) CountBytes() { p.count.Store(true) }

// Bytes returns the bytes the proxy has forwarded so far over the
// connections it counts (CountBytes): toTarget from the dialling side to
// the target, fromTarget back. They are the bytes on the wire of the link
// it carries (TLS records and compressed frames as they are).
func (p *Proxy) Bytes() (toTarget, fromTarget int64) {
	return p.toTarget.Load(), p.fromTarget.Load()
}

// Cut drops every connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// AllowStall makes the connections the proxy accepts from now on ones
// that Stall can stall. It is off by default, for the same cost as
// CountBytes.
func (p *Proxy) AllowStall() { p.stallable.Store(true) }

// Stall drops every byte in either direction from now on, and keeps the
// connections open, until Heal. It stalls the connections accepted after
// AllowStall, and those it accepts meanwhile.
func (p *Proxy) Stall() { p.stalled.Store(true) }

// Heal ends a stall: it closes the stalled connections (their byte
// streams are broken) and forwards new ones again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.stalled.Store(false)
}

// IsCut reports whether the link is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(u) {
		u.Close()
		return
	}
	defer p.untrack(u)
	done := make(chan struct{}, 2)
	counted, stallable := p.count.Load(), p.stallable.Load()
	pipe := func(dst, src net.Conn, n *atomic.Int64) {
		var w io.Writer = dst
		if counted {
			w = countWriter{w, n}
		}
		if stallable {
			w = stallWriter{w, &p.stalled}
		}
		io.Copy(w, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(u, c, &p.toTarget)
	go pipe(c, u, &p.fromTarget)
	<-done
	<-done
}

// stallWriter drops what it is given while stalled is set.
type stallWriter struct {
	w       io.Writer
	stalled *atomic.Bool
}

func (s stallWriter) Write(b []byte) (int, error) {
	if s.stalled.Load() {
		return len(b), nil
	}
	return s.w.Write(b)
}

// countWriter adds what it writes to n.
type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(b []byte) (int, error) {
	k, err := c.w.Write(b)
	c.n.Add(int64(k))
	return k, err
}
