// Package faultlog is the chaos driver's fault log: every fault injected
// (kind, target, how long, a note), every finding (a fault the system
// under test handled wrongly) and every fault skipped, written as lines to
// a file and, by choice, to the driver's stderr, and tallied for the
// report.
package faultlog

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Log keeps the fault log: what was injected, what went wrong, what was
// skipped. It writes every line to its file as well.
type Log struct {
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

// New returns a Log that appends to the file logPath and writes to w what
// is always shown (findings, skips, infos), and with verbose every line.
func New(w io.Writer, verbose bool, logPath string) *Log {
	f, _ := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	return &Log{start: time.Now(), w: w, verbose: verbose, f: f, rows: map[string]*faultRow{}}
}

// Close closes the log file.
func (r *Log) Close() {
	if r.f != nil {
		r.f.Close()
	}
}

func (r *Log) stamp() string {
	return fmt.Sprintf("[%6.1fs]", time.Since(r.start).Seconds())
}

// line writes to the log file and, if toStderr, to the driver's stderr.
// The caller holds r.mu.
func (r *Log) line(toStderr bool, s string) {
	s = r.stamp() + " " + s
	if r.f != nil {
		fmt.Fprintln(r.f, s)
	}
	if toStderr {
		fmt.Fprintln(r.w, s)
	}
}

// Fault counts one injected fault of kind on target that lasted d (zero for
// instant faults).
func (r *Log) Fault(kind, target string, d time.Duration) {
	r.FaultNote(kind, target, d, "")
}

// FaultNote is fault with a short outcome note counted per row.
func (r *Log) FaultNote(kind, target string, d time.Duration, note string) {
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

// Finding records a fault-behaviour failure: a box crashed by itself, a
// full disk went unreported, a corrupt outbox was accepted.
func (r *Log) Finding(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf(format, args...)
	r.findings = append(r.findings, s)
	r.line(true, "FINDING: "+s)
}

// Info logs a noteworthy event that is not a failure.
func (r *Log) Info(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.infos++
	r.line(true, fmt.Sprintf(format, args...))
}

// Debug logs to the log file, and to stderr with -v.
func (r *Log) Debug(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.line(r.verbose, fmt.Sprintf(format, args...))
}

// Skip records that a selected fault cannot run here.
func (r *Log) Skip(kind, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf(format, args...)
	r.skips = append(r.skips, s)
	r.line(true, "SKIP: "+s)
}

// Count is how many faults of the kinds given were injected (of every
// kind if none is given).
func (r *Log) Count(kinds ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(kinds) == 0 {
		return r.total
	}
	n := 0
	for _, row := range r.rows {
		if slices.Contains(kinds, row.kind) {
			n += row.count
		}
	}
	return n
}

// Notes is how many faults were injected with the note given.
func (r *Log) Notes(note string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, row := range r.rows {
		n += row.notes[note]
	}
	return n
}

// Findings are the findings recorded so far.
func (r *Log) Findings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.findings)
}

// Table writes the faults by kind.
func (r *Log) Table(w io.Writer) {
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

// faultLine matches a Log's line "fault KIND TARGET [for D] [(NOTE)]".
var faultLine = regexp.MustCompile(`^\[\s*[\d.]+s\] fault (\S+) (.+?)(?: for (\S+))?(?: \((.*)\))?$`)

// Replay folds in the findings and the lines of faults of the kinds given
// from the log file at path, written by another Log, and stops writing to
// its writer.
func (r *Log) Replay(path string, kinds []string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	r.mu.Lock()
	r.w = io.Discard
	r.mu.Unlock()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "] FINDING: ") {
			r.Finding("%s", strings.SplitN(line, "] FINDING: ", 2)[1])
			continue
		}
		m := faultLine.FindStringSubmatch(line)
		if m == nil || !slices.Contains(kinds, m[1]) {
			continue
		}
		d, _ := time.ParseDuration(m[3])
		r.FaultNote(m[1], m[2], d, m[4])
	}
}
