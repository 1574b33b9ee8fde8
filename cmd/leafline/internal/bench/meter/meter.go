// Package meter draws the bench's progress on a terminal, a line per
// phase.
package meter

import (
	"fmt"
	"io"
	"math"
	"sync"
	"time"
)

// Meter draws a phase's progress on a terminal: one line per phase,
// redrawn in place every progressEvery, with what the phase is doing, its
// count against its total, the rate and the time left. A phase's line
// stays on screen, with its wall time, once the next phase begins.
//
// The meter writes only to Options.Progress; a nil *Meter (no Progress)
// draws nothing and every method is a no-op. Text the run writes to
// Options.Out through Out erases the line first, so the two share a
// terminal without mixing on one line; Out's bytes are unchanged.
type Meter struct {
	w      io.Writer
	mu     sync.Mutex
	cur    *meterLine // nil between phases
	open   bool       // a line is drawn without its newline
	closed bool       // the run has returned: nothing more is drawn
	stop   chan struct{}
	done   chan struct{}
}

// meterLine is what the current phase's line shows.
type meterLine struct {
	phase string
	start time.Time // the phase's
	step  string
	unit  string // "" for a step without a count
	total int64
	count func() int64
	wait  time.Duration // a timed step: its length
	from  time.Time     // the step's start
	last  int64         // the count last read
}

// progressEvery is how often the line is redrawn.
const progressEvery = 500 * time.Millisecond

// New returns a meter drawing on w, or nil (no progress) for a nil w.
func New(w io.Writer) *Meter {
	if w == nil {
		return nil
	}
	m := &Meter{w: w, stop: make(chan struct{}), done: make(chan struct{})}
	go m.loop()
	return m
}

func (m *Meter) loop() {
	defer close(m.done)
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.redraw()
		}
	}
}

// phase ends the line of the phase before, if any, and begins one for
// name.
func (m *Meter) Phase(name string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.finish("done in")
	now := time.Now()
	m.cur = &meterLine{phase: name, start: now, from: now}
	m.draw()
}

// track makes the line show step: count() of total unit, its rate since
// the step began and the time left at that rate. count is read from the
// meter's goroutine, so it must be safe to call concurrently; it counts
// from 0 at the step's start. A nil count shows the step's elapsed time.
func (m *Meter) Track(step, unit string, total int64, count func() int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return
	}
	c := m.cur
	c.step, c.unit, c.total, c.count, c.wait, c.from, c.last = step, unit, total, count, 0, time.Now(), 0
	m.draw()
}

// waiting makes the line show step as a wait of d.
func (m *Meter) Waiting(step string, d time.Duration) {
	if m == nil {
		return
	}
	m.Track(step, "", 0, nil)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil {
		m.cur.wait = d
		m.draw()
	}
}

// end ends the current phase's line with its wall time.
func (m *Meter) End() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finish("done in")
}

// close stops the redraws and ends a phase's line still drawn (a failed
// or stopped run); nothing is drawn after it.
func (m *Meter) Close() {
	if m == nil {
		return
	}
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finish("ended after")
	m.closed = true
}

// redraw reads the count outside the lock (it may ask a server) and draws.
func (m *Meter) redraw() {
	m.mu.Lock()
	c := m.cur
	var count func() int64
	if c != nil {
		count = c.count
	}
	m.mu.Unlock()
	if c == nil {
		return
	}
	if count != nil {
		n, ok := safeCount(count)
		if !ok {
			return
		}
		m.mu.Lock()
		if m.cur == c {
			c.last = n
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == c {
		m.draw()
	}
}

// safeCount calls count; a count whose system was closed under it (a
// stopped run) panics, and then reports nothing.
func safeCount(count func() int64) (n int64, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return count(), true
}

// draw writes the current line over the one on screen; m.mu held.
func (m *Meter) draw() {
	if m.cur == nil || m.closed {
		return
	}
	fmt.Fprint(m.w, "\r\033[K", m.cur.text(time.Now()))
	m.open = true
}

// finish replaces the current line with the phase's wall time
// ("bench: F fleet [relay]: done in 2m41s") and ends it; m.mu held.
func (m *Meter) finish(verb string) {
	if m.cur == nil || m.closed {
		return
	}
	fmt.Fprintf(m.w, "\r\033[Kbench: %s: %s %s\n", m.cur.phase, verb, round(time.Since(m.cur.start)))
	m.cur, m.open = nil, false
}

// text is the line: "bench: <phase>: <step> <count>/<total> <unit>, <rate>/s, ETA <left>".
func (c *meterLine) text(now time.Time) string {
	s := "bench: " + c.phase
	if c.step != "" {
		s += ": " + c.step
	}
	el := now.Sub(c.from)
	switch {
	case c.wait > 0:
		s += fmt.Sprintf(" %s of %s, ETA %s", round(el), round(c.wait), round(max(0, c.wait-el)))
	case c.count == nil:
		s += fmt.Sprintf(" %s", round(el))
	default:
		s += fmt.Sprintf(" %d/%d %s", c.last, c.total, c.unit)
		if rate := float64(c.last) / el.Seconds(); el > time.Second && rate > 0 {
			left := time.Duration(math.Min(float64(c.total-c.last)/rate, 1e6) * float64(time.Second))
			s += fmt.Sprintf(", %.0f/s, ETA %s", rate, round(max(0, left)))
		}
	}
	return s + fmt.Sprintf(" [phase %s]", round(now.Sub(c.start)))
}

// round prints d in whole seconds.
func round(d time.Duration) time.Duration { return d.Round(time.Second) }

// out returns w wrapped so that writing to it first erases a progress
// line on screen; w itself without progress.
func (m *Meter) Out(w io.Writer) io.Writer {
	if m == nil {
		return w
	}
	return meterOut{m, w}
}

type meterOut struct {
	m *Meter
	w io.Writer
}

func (o meterOut) Write(p []byte) (int, error) {
	o.m.mu.Lock()
	defer o.m.mu.Unlock()
	if o.m.open {
		fmt.Fprint(o.m.w, "\r\033[K")
		o.m.open = false
	}
	return o.w.Write(p)
}
