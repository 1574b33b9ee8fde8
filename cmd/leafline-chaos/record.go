//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// recorder keeps the fault log: what was injected, what went wrong, what
// was skipped. It writes every line to <dir>/chaos.log as well.
type recorder struct {
	mu       sync.Mutex
	start    time.Time
	w        io.Writer // the driver's stderr
	verbose  bool
	f        *os.File
	rows     map[string]*faultRow
	total    int
	findings []string
	skips    []string
	infos    int
}

type faultRow struct {
	kind, target string
	count        int
	maxDur       time.Duration
	totalDur     time.Duration
	notes        map[string]int
}

func newRecorder(w io.Writer, verbose bool, logPath string) *recorder {
	f, _ := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	return &recorder{start: time.Now(), w: w, verbose: verbose, f: f, rows: map[string]*faultRow{}}
}

func (r *recorder) close() {
	if r.f != nil {
		r.f.Close()
	}
}

func (r *recorder) stamp() string {
	return fmt.Sprintf("[%6.1fs]", time.Since(r.start).Seconds())
}

// line writes to the log file and, if toStderr, to the driver's stderr.
// The caller holds r.mu.
func (r *recorder) line(toStderr bool, s string) {
	s = r.stamp() + " " + s
	if r.f != nil {
		fmt.Fprintln(r.f, s)
	}
	if toStderr {
		fmt.Fprintln(r.w, s)
	}
}

// fault counts one injected fault of kind on target that lasted d (zero for
// instant faults).
func (r *recorder) fault(kind, target string, d time.Duration) {
	r.faultNote(kind, target, d, "")
}

// faultNote is fault with a short outcome note counted per row.
func (r *recorder) faultNote(kind, target string, d time.Duration, note string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := kind + " " + target
	row := r.rows[key]
	if row == nil {
		row = &faultRow{kind: kind, target: target, notes: map[string]int{}}
		r.rows[key] = row
	}
	row.count++
	row.totalDur += d
	row.maxDur = max(row.maxDur, d)
	if note != "" {
		row.notes[note]++
	}
	r.total++
	msg := fmt.Sprintf("fault %s %s", kind, target)
	if d > 0 {
		msg += fmt.Sprintf(" for %s", d.Round(100*time.Millisecond))
	}
	if note != "" {
		msg += " (" + note + ")"
	}
	r.line(r.verbose, msg)
}

// finding records a fault-behaviour failure: a box crashed by itself, a
// full disk went unreported, a corrupt outbox was accepted.
func (r *recorder) finding(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf(format, args...)
	r.findings = append(r.findings, s)
	r.line(true, "FINDING: "+s)
}

// info logs a noteworthy event that is not a failure.
func (r *recorder) info(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.infos++
	r.line(true, fmt.Sprintf(format, args...))
}

// debug logs to the log file, and to stderr with -v.
func (r *recorder) debug(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.line(r.verbose, fmt.Sprintf(format, args...))
}

// skip records that a selected fault cannot run here.
func (r *recorder) skip(kind, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf(format, args...)
	r.skips = append(r.skips, s)
	r.line(true, "SKIP: "+s)
}

func (r *recorder) totals() (total, kills, cuts, longCuts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, row := range r.rows {
		switch row.kind {
		case faultKill, faultFailpoint:
			kills += row.count
		case faultLinkCut, faultNetns:
			cuts += row.count
		}
		longCuts += row.notes["long"]
	}
	return r.total, kills, cuts, longCuts
}

func (r *recorder) countOf(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, row := range r.rows {
		if row.kind == kind {
			n += row.count
		}
	}
	return n
}

// table writes the faults by kind.
func (r *recorder) table(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rows := make([]*faultRow, 0, len(r.rows))
	for _, row := range r.rows {
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].kind != rows[j].kind {
			return rows[i].kind < rows[j].kind
		}
		return rows[i].target < rows[j].target
	})
	fmt.Fprintf(w, "faults by kind:\n")
	fmt.Fprintf(w, "  %-10s %-28s %6s %10s %10s  %s\n", "kind", "target", "count", "max", "total", "notes")
	for _, row := range rows {
		dur := func(d time.Duration) string {
			if d == 0 {
				return "-"
			}
			return d.Round(100 * time.Millisecond).String()
		}
		var notes []string
		for n, c := range row.notes {
			notes = append(notes, fmt.Sprintf("%s=%d", n, c))
		}
		sort.Strings(notes)
		fmt.Fprintf(w, "  %-10s %-28s %6d %10s %10s  %s\n", row.kind, row.target, row.count, dur(row.maxDur), dur(row.totalDur), strings.Join(notes, " "))
	}
	if len(rows) == 0 {
		fmt.Fprintf(w, "  (none)\n")
	}
	for _, s := range r.skips {
		fmt.Fprintf(w, "  skipped: %s\n", s)
	}
}
