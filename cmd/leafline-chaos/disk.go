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
	ctx := context.Background()
	t := in.c.disk
	acked := func() (float64, *proc) {
		p := b.running()
		m, err := scrape(b.opsAddr)
		if err != nil || p == nil {
			return -1, p
		}
		return m["leafline_messages_acked_total"], p
	}
	// Keep edge1's path to L1 up for the whole fault, so that events keep
	// arriving and the full disk is actually hit.
	var held []*link
	for _, name := range []string{"edge1-hub", "hub-l1"} {
		l := in.c.link(name)
		for !l.busy.CompareAndSwap(false, true) {
			ctxsleep.For(ctx, 200*time.Millisecond)
		}
		held = append(held, l)
	}
	if ns := in.c.ns; ns != nil {
		for !ns.busy.CompareAndSwap(false, true) {
			ctxsleep.For(ctx, 200*time.Millisecond)
		}
		defer ns.busy.Store(false)
	}
	defer func() {
		for _, l := range held {
			l.busy.Store(false)
		}
	}()
	logOff := logSize(b.logPath)
	startsBefore := b.Starts()
	b.setNote("the full-disk fault")
	t0 := time.Now()
	n, err := t.fill()
	if err != nil {
		in.rec.Info("disk fault: filling %s: %v", t.dir, err)
	}
	in.rec.Debug("disk fault: %s full (filler %s)", t.dir, fmtBytes(n))

	// While full: does it stop ACKing, and does it say why?
	var (
		readyzBad  string // first /readyz answer that is not 200 ready
		readyzSeen string
		readyzDown int // answers missed: the process was down (exiting and restarting)
		ackedAt5s  = -1.0
		ackedEnd   = -1.0
		procAt5s   *proc
		procEnd    *proc
	)
	deadline := t0.Add(hold)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ctxsleep.For(ctx, 2*time.Second)
		if code, r, body, err := b.readyz(); err == nil {
			readyzSeen = fmt.Sprintf("HTTP %d %s", code, oneLine(body))
			if (code != 200 || !r.Ready) && readyzBad == "" {
				readyzBad = readyzSeen
			}
		} else {
			readyzDown++
		}
		if v, p := acked(); v >= 0 {
			if ackedAt5s < 0 && time.Since(t0) >= 5*time.Second {
				ackedAt5s, procAt5s = v, p
			}
			ackedEnd, procEnd = v, p
		}
	}
	fullLog := b.logSince(logOff, 400)
	metricsSeen := metricLines(b.opsAddr, "disk", "storage", "space", "jetstream_enabled", "full")
	_, _, metricsErr := httpGet("http://" + b.opsAddr + "/metrics")
	restartsWhileFull := b.Starts() - startsBefore

	// Free the space: does it resume by itself?
	t.removeFiller()
	t1 := time.Now()
	base, baseProc := acked()
	resumed, how := false, ""
	for time.Since(t1) < 60*time.Second && ctx.Err() == nil {
		ctxsleep.For(ctx, time.Second)
		v, p := acked()
		if v < 0 {
			continue
		}
		if (p == baseProc && v > base) || (p != baseProc && v > 0) {
			resumed = true
			if b.Starts() > startsBefore+restartsWhileFull || p != baseProc {
				how = fmt.Sprintf("resumed %.0fs after the space was freed, after the process exited and was restarted", time.Since(t1).Seconds())
			} else {
				how = fmt.Sprintf("resumed in-process %.0fs after the space was freed", time.Since(t1).Seconds())
			}
			break
		}
	}
	b.setNote("")

	var problems []string
	// A few ACKs are fine: a redelivered event whose receipt is already
	// published is ACKed without writing anything. More than a batch is not.
	if procAt5s != nil && procAt5s == procEnd && ackedEnd > ackedAt5s+64 {
		problems = append(problems, fmt.Sprintf("kept ACKing on a full disk (messages_acked_total %v -> %v)", ackedAt5s, ackedEnd))
	}
	var logHits []string
	for _, l := range strings.Split(fullLog, "\n") {
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
	switch {
	case readyzBad == "" && readyzSeen == "":
		// Never answered: the box kept exiting; its log says why.
		readyzBad = fmt.Sprintf("no answer (%d tries): the box kept exiting and restarting", readyzDown)
	case readyzBad == "":
		problems = append(problems, "/readyz: stayed ready while the disk was full (last: "+readyzSeen+")")
	case readyzSeen != "" && !diskWords.MatchString(readyzBad) && !strings.Contains(strings.ToLower(readyzBad), "disk") && !strings.Contains(strings.ToLower(readyzBad), "jetstream"):
		problems = append(problems, "/readyz: not ready, but the reason does not name the disk ("+readyzBad+")")
	}
	if len(metricsSeen) == 0 && metricsErr == nil {
		problems = append(problems, "/metrics: no leafline metric shows the full disk or a disabled JetStream")
	}
	if restartsWhileFull > 0 {
		in.rec.Info("disk fault: %s exited %d time(s) while the disk was full (restarted by the driver, as a service manager would)", b.name, restartsWhileFull)
	}
	if !resumed {
		b.stop(syscall.SIGTERM, 20*time.Second)
		t2 := time.Now()
		if err := b.start(context.Background(), b.env()); err != nil {
			in.rec.Info("disk fault: restart of %s: %v", b.name, err)
		}
		how = "none by itself; after a restart by the driver: no ACK within 60s"
		for time.Since(t2) < 60*time.Second {
			ctxsleep.For(ctx, time.Second)
			if v, _ := acked(); v > 0 {
				how = fmt.Sprintf("none by itself; ACKing again %.0fs after a restart by the driver", time.Since(t2).Seconds())
				break
			}
		}
		problems = append(problems, "did not resume within 60s after the space was freed (the process stayed up, stuck)")
	}
	note := "ok"
	if len(problems) > 0 {
		note = "check failed"
		in.rec.Finding("full disk at %s: %s\n    log lines while full: %s\n    /readyz while full: %s\n    metrics: %s\n    recovery: %s",
			b.name, strings.Join(problems, "; "), firstN(logHits, 3), orNone(readyzBad, readyzSeen), firstN(metricsSeen, 5), orNone(how, "none"))
	} else {
		in.rec.Info("full disk at %s: stopped ACKing, said why (log: %s; readyz: %s; metrics: %s); %s",
			b.name, oneLine(logHits[0]), readyzBad, firstN(metricsSeen, 2), how)
	}
	in.rec.FaultNote(faultDisk, b.name, time.Since(t0), note)
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
