package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Interval is how often a Bar redraws.
const Interval = 250 * time.Millisecond

// Bar is one operation's progress line.
type Bar struct {
	w     io.Writer
	label string
	total int64
	start time.Time
	n     atomic.Int64
	stop  chan struct{}
	done  sync.WaitGroup
	once  sync.Once
	mu    sync.Mutex // one writer on the terminal at a time
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}

// Start shows a bar for an operation of total units (0 when unknown) on w,
// if w is a terminal; otherwise it returns nil, which does nothing.
func Start(w io.Writer, label string, total int64) *Bar {
	if !IsTerminal(w) {
		return nil
	}
	return start(w, label, total)
}

func start(w io.Writer, label string, total int64) *Bar {
	b := &Bar{w: w, label: label, total: total, start: time.Now(), stop: make(chan struct{})}
	b.done.Add(1)
	go b.loop()
	return b
}

func (b *Bar) loop() {
	defer b.done.Done()
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.mu.Lock()
			b.draw()
			b.mu.Unlock()
		}
	}
}

func (b *Bar) draw() {
	fmt.Fprintf(b.w, "\r%s\033[K", Line(b.label, b.n.Load(), b.total, time.Since(b.start)))
}

// Println prints a line to w above the bar (w may be the bar's terminal or
// another writer); on a nil Bar it is fmt.Fprintln.
func (b *Bar) Println(w io.Writer, a ...any) {
	if b == nil {
		fmt.Fprintln(w, a...)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprint(b.w, "\r\033[K")
	fmt.Fprintln(w, a...)
	b.draw()
}

// Add counts n more units done.
func (b *Bar) Add(n int64) {
	if b != nil {
		b.n.Add(n)
	}
}

// Set sets the units done.
func (b *Bar) Set(n int64) {
	if b != nil {
		b.n.Store(n)
	}
}

// Stop draws the final line and ends it; a second Stop does nothing.
func (b *Bar) Stop() {
	if b == nil {
		return
	}
	b.once.Do(func() {
		close(b.stop)
		b.done.Wait()
		b.mu.Lock()
		defer b.mu.Unlock()
		b.draw()
		fmt.Fprintln(b.w)
	})
}

// Line renders one progress line: "label  n/total  rate/s  ETA d" (no ETA
// without a total or a rate yet).
func Line(label string, n, total int64, elapsed time.Duration) string {
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	if total <= 0 {
		return fmt.Sprintf("%s  %d  %.0f/s", label, n, rate)
	}
	pct := 100 * float64(n) / float64(total)
	eta := "--"
	switch {
	case n >= total:
		eta = "done in " + elapsed.Round(100*time.Millisecond).String()
	case rate > 0:
		eta = "ETA " + time.Duration(float64(total-n)/rate*float64(time.Second)).Round(time.Second).String()
	}
	return fmt.Sprintf("%s  %d/%d (%.0f%%)  %.0f/s  %s", label, n, total, pct, rate, eta)
}
