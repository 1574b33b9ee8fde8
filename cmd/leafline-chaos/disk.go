//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leafline/leafline/internal/ctxsleep"
)

// tmpfs is edge1's data dir on a small, size-limited filesystem, and the
// filler file that makes it full.
type tmpfs struct {
	dir    string
	size   int64
	filler string
}

func mountTmpfs(dir string, size int64) (*tmpfs, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("mounting a tmpfs needs root")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		return nil, fmt.Errorf("mount tmpfs (%s) on %s: %w", fmtBytes(size), dir, err)
	}
	return &tmpfs{dir: dir, size: size, filler: filepath.Join(dir, "chaos-filler")}, nil
}

// fill writes the filler until the filesystem is full.
func (t *tmpfs) fill() (int64, error) {
	f, err := os.OpenFile(t.filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			w, err := f.Write(buf)
			n += int64(w)
			if err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					break
				}
				return n, err
			}
		}
	}
	return n, nil
}

func (t *tmpfs) removeFiller() { _ = os.Remove(t.filler) }

// unmount removes the filler and unmounts; with keep, it first copies the
// contents next to the mount point (they vanish with the tmpfs).
func (t *tmpfs) unmount(keep bool) {
	t.removeFiller()
	if keep {
		_ = copyTree(t.dir, t.dir+"-tmpfs-copy")
	}
	_ = syscall.Unmount(t.dir, syscall.MNT_DETACH)
}

// Lines of a box's log that say the disk is full.
var diskWords = regexp.MustCompile(`(?i)no space left|enospc|disk is full|disk full|out of space|out of (storage )?resources|insufficient (storage )?resources|storage full`)

// diskFull fills edge1's filesystem for hold, checks that the edge stops
// ACKing and says why (log, /readyz, /metrics), frees the space and checks
// that the edge resumes by itself. What leafline did not do is recorded as
// a finding, precisely.
//
// The fault runs to its end even when the fault phase ends meanwhile (at
// most hold + 60s): a half-observed full disk proves nothing.
func (in *injector) diskFull(_ context.Context, b *box, hold time.Duration) {
	defer b.mu.Unlock()
	defer in.holdLinks()()
	t := in.c.disk
	logOff := logSize(b.logPath)
	startsBefore := b.Starts()
	b.setNote("the full-disk fault")
	t0 := time.Now()
	n, err := t.fill()
	if err != nil {
		in.rec.Info("disk fault: filling %s: %v", t.dir, err)
	}
	in.rec.Debug("disk fault: %s full (filler %s)", t.dir, fmtBytes(n))
	f := watchFull(b, t0.Add(hold))
	f.log = b.logSince(logOff, 400)
	f.restarts = b.Starts() - startsBefore

	t.removeFiller()
	resumed, how := awaitResume(b, startsBefore+f.restarts)
	b.setNote("")

	problems, logHits := f.problems()
	if f.restarts > 0 {
		in.rec.Info("disk fault: %s exited %d time(s) while the disk was full (restarted by the driver, as a service manager would)", b.name, f.restarts)
	}
	if !resumed {
		how = in.restartStuck(b)
		problems = append(problems, "did not resume within 60s after the space was freed (the process stayed up, stuck)")
	}
	note := "ok"
	if len(problems) > 0 {
		note = "check failed"
		in.rec.Finding("full disk at %s: %s\n    log lines while full: %s\n    /readyz while full: %s\n    metrics: %s\n    recovery: %s",
			b.name, strings.Join(problems, "; "), firstN(logHits, 3), orNone(f.readyzBad, f.readyzSeen), firstN(f.metrics, 5), orNone(how, "none"))
	} else {
		in.rec.Info("full disk at %s: stopped ACKing, said why (log: %s; readyz: %s; metrics: %s); %s",
			b.name, oneLine(logHits[0]), f.readyzBad, firstN(f.metrics, 2), how)
	}
	in.rec.FaultNote(faultDisk, b.name, time.Since(t0), note)
}

// holdLinks keeps edge1's path to L1 up for the whole fault, so that
// events keep arriving and the full disk is actually hit. It returns the
// release.
func (in *injector) holdLinks() func() {
	ctx := context.Background()
	busy := []*atomic.Bool{&in.c.link("edge1-hub").busy, &in.c.link("hub-l1").busy}
	if ns := in.c.ns; ns != nil {
		busy = append(busy, &ns.busy)
	}
	for _, f := range busy {
		for !f.CompareAndSwap(false, true) {
			ctxsleep.For(ctx, 200*time.Millisecond)
		}
	}
	return func() {
		for _, f := range busy {
			f.Store(false)
		}
	}
}

// ackedBy is b's leafline_messages_acked_total and its current process;
// -1 when it cannot be read.
func ackedBy(b *box) (float64, *proc) {
	p := b.running()
	m, err := scrape(b.opsAddr)
	if err != nil || p == nil {
		return -1, p
	}
	return m["leafline_messages_acked_total"], p
}

// fullDisk is what a box showed while its disk was full.
type fullDisk struct {
	readyzBad  string // first /readyz answer that is not 200 ready
	readyzSeen string // the last answer
	readyzDown int    // answers missed: the process was down (exiting and restarting)
	ackedAt5s  float64
	ackedEnd   float64
	procAt5s   *proc
	procEnd    *proc
	log        string   // the box's log lines meanwhile
	metrics    []string // metric lines about the disk or storage
	metricsErr error
	restarts   int // times the box exited and was started again
}

// watchFull polls b's /readyz and ACK counter until deadline.
func watchFull(b *box, deadline time.Time) *fullDisk {
	ctx := context.Background()
	f := &fullDisk{ackedAt5s: -1, ackedEnd: -1}
	t0 := time.Now()
	for time.Now().Before(deadline) {
		ctxsleep.For(ctx, 2*time.Second)
		if code, r, body, err := b.readyz(); err == nil {
			f.readyzSeen = fmt.Sprintf("HTTP %d %s", code, oneLine(body))
			if (code != 200 || !r.Ready) && f.readyzBad == "" {
				f.readyzBad = f.readyzSeen
			}
		} else {
			f.readyzDown++
		}
		if v, p := ackedBy(b); v >= 0 {
			if f.ackedAt5s < 0 && time.Since(t0) >= 5*time.Second {
				f.ackedAt5s, f.procAt5s = v, p
			}
			f.ackedEnd, f.procEnd = v, p
		}
	}
	f.metrics = metricLines(b.opsAddr, "disk", "storage", "space", "jetstream_enabled", "full")
	_, _, f.metricsErr = httpGet("http://" + b.opsAddr + "/metrics")
	return f
}

// awaitResume waits up to 60 s, once the space is freed, for b to ACK
// again; starts is b's start count when the space was freed.
func awaitResume(b *box, starts int) (bool, string) {
	ctx := context.Background()
	t1 := time.Now()
	base, baseProc := ackedBy(b)
	for time.Since(t1) < 60*time.Second {
		ctxsleep.For(ctx, time.Second)
		v, p := ackedBy(b)
		if v < 0 {
			continue
		}
		if (p == baseProc && v > base) || (p != baseProc && v > 0) {
			if b.Starts() > starts || p != baseProc {
				return true, fmt.Sprintf("resumed %.0fs after the space was freed, after the process exited and was restarted", time.Since(t1).Seconds())
			}
			return true, fmt.Sprintf("resumed in-process %.0fs after the space was freed", time.Since(t1).Seconds())
		}
	}
	return false, ""
}

// problems lists what b did wrong while its disk was full, and the log
// lines that speak of the disk.
func (f *fullDisk) problems() (problems, logHits []string) {
	// A few ACKs are fine: a redelivered event whose receipt is already
	// published is ACKed without writing anything. More than a batch is not.
	if f.procAt5s != nil && f.procAt5s == f.procEnd && f.ackedEnd > f.ackedAt5s+64 {
		problems = append(problems, fmt.Sprintf("kept ACKing on a full disk (messages_acked_total %v -> %v)", f.ackedAt5s, f.ackedEnd))
	}
	for _, l := range strings.Split(f.log, "\n") {
		if diskWords.MatchString(l) {
			logHits = append(logHits, l)
		}
	}
	own := false
	for _, l := range logHits {
		own = own || !strings.Contains(l, "component=nats-server")
	}
	switch {
	case len(logHits) == 0:
		problems = append(problems, "log: no line says the disk is full")
	case !own:
		problems = append(problems, "log: only the embedded nats-server says it ("+oneLine(logHits[0])+"); leafline itself logs nothing about the disk")
	}
	lower := strings.ToLower(f.readyzBad)
	switch {
	case f.readyzBad == "" && f.readyzSeen == "":
		// Never answered: the box kept exiting; its log says why.
		f.readyzBad = fmt.Sprintf("no answer (%d tries): the box kept exiting and restarting", f.readyzDown)
	case f.readyzBad == "":
		problems = append(problems, "/readyz: stayed ready while the disk was full (last: "+f.readyzSeen+")")
	case f.readyzSeen != "" && !diskWords.MatchString(f.readyzBad) && !strings.Contains(lower, "disk") && !strings.Contains(lower, "jetstream"):
		problems = append(problems, "/readyz: not ready, but the reason does not name the disk ("+f.readyzBad+")")
	}
	if len(f.metrics) == 0 && f.metricsErr == nil {
		problems = append(problems, "/metrics: no leafline metric shows the full disk or a disabled JetStream")
	}
	return problems, logHits
}

// restartStuck restarts b, which did not resume by itself, and says
// whether it ACKs again within 60 s.
func (in *injector) restartStuck(b *box) string {
	b.stop(syscall.SIGTERM, 20*time.Second)
	t2 := time.Now()
	if err := b.start(context.Background(), b.env()); err != nil {
		in.rec.Info("disk fault: restart of %s: %v", b.name, err)
	}
	for time.Since(t2) < 60*time.Second {
		ctxsleep.For(context.Background(), time.Second)
		if v, _ := ackedBy(b); v > 0 {
			return fmt.Sprintf("none by itself; ACKing again %.0fs after a restart by the driver", time.Since(t2).Seconds())
		}
	}
	return "none by itself; after a restart by the driver: no ACK within 60s"
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func firstN(lines []string, n int) string {
	if len(lines) == 0 {
		return "none"
	}
	var out []string
	for i, l := range lines {
		if i == n {
			out = append(out, fmt.Sprintf("(+%d more)", len(lines)-n))
			break
		}
		out = append(out, oneLine(l))
	}
	return strings.Join(out, " | ")
}

func orNone(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
