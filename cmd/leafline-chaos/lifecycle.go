//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leafline/leafline/internal/ctxsleep"
	"github.com/leafline/leafline/sink"
)

// The lifecycle faults do to a box what happens to one in the field
// besides a crash:
//
//   - park: an edge switched off for longer than its hub holds its
//     events (its backlog budget, parkBudget): the hub releases its oldest
//     events, and L1 sends them again to it alone once it is back;
//   - replace: a box (an edge or the hub) whose disk is replaced by a
//     blank one under the same site and credentials: its data dir wiped
//     while it is stopped, then started on the same config;
//   - rollback: a box restored from an older copy: stopped, copied with
//     `leafline backup`, started; later stopped, its data dir wiped and
//     filled again with `leafline restore`, started.
//
// L1 is never replaced or rolled back: its completion state is what the
// checker judges (TestFleet_RolledBack covers L1 in-process).

// lifecycleMargin is the least fault time a replace or a rollback leaves
// after it. L1's redrive repairs what a wiped box lost only once the edge
// has reported a later event (completion/redrive.go), and the publisher
// stops with the fault phase: a box wiped at its very end could lose the
// run's last events with nothing later to report, which no redrive would
// notice. That is a limit of the redrive, not a loss the fault should
// claim.
const lifecycleMargin = 15 * time.Second

// releasedMetric is what a hub released of an edge's events past its
// backlog budget (label edge).
const releasedMetric = "leafline_edge_backlog_released_messages_total"

// upstreamChangesMetric counts the times a relay link took a replaced or
// rolled-back upstream stream again.
const upstreamChangesMetric = "leafline_link_upstream_changes_total"

// releases follows the hub's releasedMetric by edge and keeps the largest
// value seen: the hub reads its releases back from its data dir when it
// restarts, so the counter only goes down when the hub's data dir is
// wiped, and the largest value seen is then still what was released.
type releases struct {
	hub *box
	mu  sync.Mutex
	max map[string]float64
}

func newReleases(hub *box) *releases { return &releases{hub: hub, max: map[string]float64{}} }

// scrapeNow reads the hub's counter of edge; ok is false when the hub does
// not answer.
func (r *releases) scrapeNow(edge string) (float64, bool) {
	if p := r.hub.running(); p == nil || !p.ready.Load() || p.paused.Load() {
		return 0, false
	}
	m, err := scrapeBy(r.hub.opsAddr, releasedMetric, "edge")
	if err != nil {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for e, v := range m {
		r.max[e] = max(r.max[e], v)
	}
	return m[edge], true
}

// total is the sum over the edges of the largest value seen of each.
func (r *releases) total() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := 0.0
	for _, v := range r.max {
		t += v
	}
	return t
}

func (r *releases) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		r.scrapeNow("")
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrapeBy reads a box's /metrics and returns the samples of one metric,
// summed by the value of one label.
func scrapeBy(opsAddr, name, label string) (map[string]float64, error) {
	code, body, err := httpGet("http://" + opsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("/metrics: HTTP %d", code)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(value, &v); err != nil {
			continue
		}
		for _, kv := range strings.Split(labels, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok && k == label {
				out[strings.Trim(val, `"`)] += v
			}
		}
	}
	return out, nil
}

// randomLifecycle starts a replace or a rollback on a box picked at
// random (an edge 60%, else the hub).
func (in *injector) randomLifecycle(ctx context.Context, kind string) {
	left := time.Until(in.end)
	switch kind {
	case faultReplace:
		if left < lifecycleMargin {
			in.rec.Debug("replace skipped: less than %s of fault time left", lifecycleMargin)
			return
		}
		down := time.Duration(in.rng.IntN(3000)) * time.Millisecond
		kill := in.rng.IntN(2) == 0
		if b := in.lockLifecycleBox(); b != nil {
			in.spawn(func() { in.replace(ctx, b, down, kill) })
		} else {
			in.rec.Debug("replace skipped: every box picked was busy")
		}
	case faultRollback:
		if left < lifecycleMargin+5*time.Second {
			in.rec.Debug("rollback skipped: less than %s of fault time left", lifecycleMargin+5*time.Second)
			return
		}
		age := 10*time.Second + time.Duration(in.rng.IntN(30))*time.Second
		kill := in.rng.IntN(2) == 0
		if b := in.lockLifecycleBox(); b != nil {
			in.setRollingBack(b, true)
			in.spawn(func() { in.rollback(ctx, b, age, kill) })
		} else {
			in.rec.Debug("rollback skipped: every box picked was busy")
		}
	}
}

// lockLifecycleBox picks an edge or the hub and takes its lock, skipping
// a box with a rollback under way: its copy is of the data dir that is
// there now, and a replace in between would make the rollback a restore
// of another box's past.
func (in *injector) lockLifecycleBox() *box {
	for range 3 {
		b := in.pickBox(false)
		if b.mu.TryLock() {
			if !in.isRollingBack(b) {
				return b
			}
			b.mu.Unlock()
		}
	}
	return nil
}

func (in *injector) setRollingBack(b *box, v bool) {
	in.lcMu.Lock()
	defer in.lcMu.Unlock()
	if in.rollingBack == nil {
		in.rollingBack = map[*box]bool{}
	}
	in.rollingBack[b] = v
}

func (in *injector) isRollingBack(b *box) bool {
	in.lcMu.Lock()
	defer in.lcMu.Unlock()
	return in.rollingBack[b]
}

// takeDown stops b (SIGKILL with kill, else SIGTERM) and holds it down:
// the watcher restarts nothing until bringUp. It does nothing and returns
// false when b has no ready process: a restart after another death is
// under way, and it could start the box again in the middle of the fault.
func (in *injector) takeDown(b *box, kill bool) bool {
	if p := b.running(); p == nil || !p.ready.Load() {
		return false
	}
	b.setHold(true)
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	b.stop(sig, 20*time.Second)
	return true
}

// bringUp starts b again after a lifecycle fault.
func (in *injector) bringUp(b *box, what string) {
	b.setHold(false)
	if err := b.start(context.Background(), b.env()); err != nil {
		in.rec.Info("restart of %s after %s: %v", b.name, what, err)
	}
}

// park stops the edge b for d, longer than its backlog budget at the hub
// lasts, and starts it again. Meanwhile it reads the hub's releases of b:
// the note says whether the hub released any (a park that releases
// nothing tests nothing; checkParks turns a run of those into a finding).
func (in *injector) park(ctx context.Context, b *box, d time.Duration, kill bool) {
	defer b.mu.Unlock()
	if !in.takeDown(b, kill) {
		return
	}
	t0 := time.Now()
	base, released := -1.0, false
	for end := t0.Add(d); ctx.Err() == nil && time.Now().Before(end); {
		if v, ok := in.released.scrapeNow(b.name); ok {
			switch {
			case base < 0 || v < base: // the first reading, or a hub wiped meanwhile
				base = v
			case v > base:
				released = true
			}
		}
		ctxsleep.For(ctx, min(time.Second, time.Until(end)))
	}
	note := "nothing released"
	if released {
		note = "released"
	}
	in.rec.FaultNote(faultPark, b.name, time.Since(t0), note)
	in.bringUp(b, "a park")
}

// replace stops the box, wipes its data dir, keeps it down for down and
// starts it again on the same config: a box whose disk was replaced by a
// blank one. Its site, topology and credentials are outside the data dir.
func (in *injector) replace(ctx context.Context, b *box, down time.Duration, kill bool) {
	defer b.mu.Unlock()
	if !in.takeDown(b, kill) {
		return
	}
	gone, err := in.wipeDataDir(b, nil)
	if err != nil {
		in.rec.Info("replace of %s: wipe: %v", b.name, err)
	}
	in.rec.Debug("replace of %s: data dir wiped (%d file sink files gone with it)", b.name, gone)
	in.rec.Fault(faultReplace, b.name, down)
	ctxsleep.For(ctx, down)
	in.bringUp(b, "a replace")
}

// rollback takes a copy of the box's data dir (stopped, `leafline
// backup`), lets it run for age, then stops it, wipes its data dir and
// restores the copy (`leafline restore`) and starts it. The caller holds
// b.mu and marked b rolling back; rollback releases the lock while the box
// runs between the two steps, so that other faults (kills, link cuts) hit
// it meanwhile. The restore is skipped when the fault phase ends too soon
// after it (lifecycleMargin). The fault's duration is the copy's age.
func (in *injector) rollback(ctx context.Context, b *box, age time.Duration, kill bool) {
	defer in.setRollingBack(b, false)
	archive := filepath.Join(in.c.dir, "backups", fmt.Sprintf("%s-%d.tar.gz", b.name, in.nBackups.Add(1)))
	defer os.Remove(archive)
	ok := in.backup(ctx, b, archive)
	b.mu.Unlock()
	if !ok {
		return
	}
	copied := time.Now()
	restoreBy := in.end.Add(-lifecycleMargin)
	ctxsleep.For(ctx, min(age, time.Until(restoreBy)))
	b.mu.Lock()
	defer b.mu.Unlock()
	// Another fault may have held the box a while: a few seconds late
	// still leaves the redrive time to act.
	if late := time.Since(restoreBy); late > 5*time.Second {
		in.rec.Debug("rollback of %s skipped: %s too close to the end of the fault phase", b.name, late.Round(time.Second))
		return
	}
	if !in.takeDown(b, kill) {
		in.rec.Debug("rollback of %s skipped: it was restarting", b.name)
		return
	}
	defer in.bringUp(b, "a rollback")
	gone, err := in.wipeDataDir(b, func() error {
		code, out := in.leafline(ctx, 2*time.Minute, "restore", "--config", b.cfgPath, "--from", archive)
		if code != 0 {
			return fmt.Errorf("leafline restore exit %d: %s", code, oneLine(out))
		}
		return nil
	})
	if err != nil {
		// The box starts blank instead: a replace, not a rollback.
		in.rec.Finding("rollback of %s: %v", b.name, err)
		if _, err := in.wipeDataDir(b, nil); err != nil {
			in.rec.Info("rollback of %s: wipe after a failed restore: %v", b.name, err)
		}
		return
	}
	in.rec.Debug("rollback of %s: restored the copy taken %s ago (%d file sink files gone with the newer data dir)",
		b.name, time.Since(copied).Round(100*time.Millisecond), gone)
	in.rec.Fault(faultRollback, b.name, time.Since(copied))
}

// backup stops b (SIGTERM), copies its data dir into archive with
// `leafline backup`, and starts it again. A backup that fails is a
// finding: the box was stopped and the command is the product's.
func (in *injector) backup(ctx context.Context, b *box, archive string) bool {
	if !in.takeDown(b, false) {
		in.rec.Debug("rollback of %s skipped: it was restarting", b.name)
		return false
	}
	defer in.bringUp(b, "a backup")
	if err := os.MkdirAll(filepath.Dir(archive), 0o755); err != nil {
		in.rec.Info("rollback of %s: %v", b.name, err)
		return false
	}
	if code, out := in.leafline(ctx, 2*time.Minute, "backup", "--config", b.cfgPath, "--out", archive); code != 0 {
		in.rec.Finding("rollback of %s: `leafline backup` of the stopped box failed (exit %d): %s", b.name, code, oneLine(out))
		return false
	}
	in.rec.Debug("rollback of %s: copy taken (%s)", b.name, archive)
	return true
}

// wipeDataDir deletes everything in b's data dir (not the dir itself,
// which may be a mount point), syncs it, and then runs fill, if any (a
// restore). The file sink's files there before and not after are added
// to b.sinkGone, and counted in gone: the operator destroyed them with the
// disk, and the end-of-run check of the file sinks (checkFileSinks) must
// not count them as work lost behind a receipt.
func (in *injector) wipeDataDir(b *box, fill func() error) (gone int, err error) {
	before := sinkFiles(b.fileSinkDir)
	defer func() {
		after := sinkFiles(b.fileSinkDir)
		b.smu.Lock()
		defer b.smu.Unlock()
		for name := range before {
			if !after[name] {
				if b.sinkGone == nil {
					b.sinkGone = map[string]bool{}
				}
				b.sinkGone[name] = true
				gone++
			}
		}
	}()
	es, err := os.ReadDir(b.dataDir)
	if err != nil {
		return 0, err
	}
	for _, e := range es {
		if err := os.RemoveAll(filepath.Join(b.dataDir, e.Name())); err != nil {
			return 0, err
		}
	}
	// Durably: a power cut of the box later must not bring the old
	// files back.
	if err := syncDir(b.dataDir); err != nil {
		return 0, err
	}
	if fill != nil {
		return 0, fill()
	}
	return 0, nil
}

// sinkFiles are the names in a file sink's directory ("" or none: no
// names).
func sinkFiles(dir string) map[string]bool {
	out := map[string]bool{}
	if dir == "" {
		return out
	}
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		out[e.Name()] = true
	}
	return out
}

// sinkGoneOf reports whether a replace or a rollback destroyed the file
// sink's file of event id at b.
func (b *box) sinkGoneOf(id string) bool {
	b.smu.Lock()
	defer b.smu.Unlock()
	return b.sinkGone[sink.FileName(id)]
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// checkParks makes a finding of a run whose parks never made the hub
// release anything: the budget was too large for the rate and the parks'
// length, and the parks tested only a stop.
func (in *injector) checkParks() {
	n := in.rec.Count(faultPark)
	if n == 0 {
		return
	}
	for _, e := range in.c.edges() {
		in.released.scrapeNow(e.name)
	}
	if in.released.total() == 0 {
		in.rec.Finding("park: %d parks of %s and the hub released nothing (%s stayed 0 with a backlog budget of %s per edge): the parks tested only a stop",
			n, in.o.ParkFor, releasedMetric, fmtBytes(parkBudget(in.o)))
	}
}
