//go:build linux

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leafline/leafline/cmd/leafline-chaos/internal/faultlog"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/receiver"
	"github.com/leafline/leafline/internal/ctxsleep"
)

// The edge failpoints, in protocol order (see internal/failpoint).
var edgeFailpoints = []string{
	"edge.after_sink_write",
	"edge.after_outbox_commit",
	"edge.before_puback",
	"edge.after_puback",
	"edge.after_mark",
}

const l1Failpoint = "l1.after_kv_write"

// l1CleanupFailpoint sits between the audit record and the delete (--cleanup).
const l1CleanupFailpoint = "l1.after_audit_write"

// injector schedules faults at random (from the seed) for the fault phase.
// Every fault runs in its own goroutine; a fault that acts on a box holds
// the box's mu, so two faults never act on one box at once. When the fault
// phase ends, ctx is cancelled and every fault restores what it broke at
// once.
type injector struct {
	c         *system
	o         options
	rng       *rand.Rand
	rec       *faultlog.Log
	l1acc     *counterAcc
	wg        sync.WaitGroup
	nCorr     int
	nCorrDone atomic.Int32 // corrupt faults run (numbering of the copies)
	// noOutboxCmd: the binary has no `outbox` command; checks run in-process.
	noOutboxCmd atomic.Bool
	end         time.Time // the end of the fault phase
	released    *releases // the hub's releases of its edges' events (park)
	nBackups    atomic.Int32
	lcMu        sync.Mutex
	rollingBack map[*box]bool // boxes between a rollback's copy and its restore
}

// regular returns the enabled faults that the scheduler mixes at random,
// each repeated by its weight.
func (in *injector) regular() []string {
	weights := map[string]int{faultKill: 4, faultFailpoint: 3, faultLinkCut: 3, faultPause: 1, faultNetns: 1, faultPowerCut: 3,
		faultReplace: 1, faultRollback: 1}
	var out []string
	for _, f := range allFaults {
		if !in.o.Faults[f] || weights[f] == 0 || (f == faultNetns && in.c.ns == nil) || (f == faultPowerCut && len(in.c.power) == 0) {
			continue
		}
		for range weights[f] {
			out = append(out, f)
		}
	}
	return out
}

// schedule is when the next fault of each kind that runs on a schedule
// (rather than at random) is due.
type schedule struct {
	long, disk, corrupt, park time.Time
}

// run schedules faults until ctx is done, then waits for every fault to
// have restored what it broke.
func (in *injector) run(ctx context.Context) {
	defer in.wg.Wait()
	o := in.o
	start := time.Now()
	end := start.Add(o.Duration)
	in.end = end
	never := end.Add(time.Hour)
	next := schedule{long: never, disk: never, corrupt: never, park: never}
	if o.Faults[faultLinkCut] && o.LongCutEvery > 0 && o.Duration >= o.LongCut+time.Minute {
		next.long = start.Add(min(o.Duration/10, time.Minute))
	}
	if o.Faults[faultPark] && o.Duration >= o.ParkFor+10*time.Second {
		next.park = start.Add(min(o.Duration/10, time.Minute))
	}
	if o.Faults[faultDisk] && in.c.disk != nil {
		next.disk = start.Add(max(o.Duration/5, 15*time.Second))
	}
	if o.Faults[faultCorrupt] {
		next.corrupt = start.Add(max(o.Duration*2/5, 20*time.Second))
	}
	kinds := in.regular()
	for {
		wait := time.Duration(float64(o.FaultEvery) * (0.5 + in.rng.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		in.scheduled(ctx, &next, end.Sub(time.Now()), never)
		if len(kinds) > 0 {
			in.random(ctx, kinds[in.rng.IntN(len(kinds))])
		}
	}
}

// scheduled starts the scheduled faults that are due; left is the time
// left in the fault phase, and never the time of a fault that will not
// come again.
func (in *injector) scheduled(ctx context.Context, next *schedule, left time.Duration, never time.Time) {
	o := in.o
	now := time.Now()
	if now.After(next.long) {
		if left >= o.LongCut+10*time.Second {
			if l := in.pickLink(); l != nil {
				in.spawn(func() { in.cut(ctx, l, o.LongCut, true) })
				next.long = next.long.Add(o.LongCutEvery)
			}
		} else {
			next.long = never
		}
	}
	if now.After(next.disk) {
		if left < 20*time.Second {
			next.disk = never
		} else if e1 := in.c.boxes["edge1"]; e1.mu.TryLock() {
			hold := 20*time.Second + time.Duration(in.rng.IntN(10))*time.Second
			in.spawn(func() { in.diskFull(ctx, e1, hold) })
			next.disk = next.disk.Add(o.DiskEvery)
		}
	}
	if now.After(next.park) {
		if left < o.ParkFor+10*time.Second {
			next.park = never
		} else if b := in.lockBox(in.pickEdge); b != nil {
			kill := in.rng.IntN(2) == 0
			in.spawn(func() { in.park(ctx, b, o.ParkFor, kill) })
			next.park = next.park.Add(o.ParkEvery)
		}
	}
	if now.After(next.corrupt) {
		edges := in.c.edges()
		b := edges[in.rng.IntN(len(edges))]
		mode := corruptModes[in.nCorr%len(corruptModes)]
		r := in.rng.Uint64()
		if left < 30*time.Second {
			next.corrupt = never
		} else if b.mu.TryLock() {
			in.nCorr++
			in.spawn(func() { in.corrupt(ctx, b, mode, r) })
			next.corrupt = next.corrupt.Add(o.CorruptEvery)
		}
	}
}

// random starts one fault of kind on a target picked at random.
func (in *injector) random(ctx context.Context, kind string) {
	o := in.o
	switch kind {
	case faultKill:
		down := time.Duration(in.rng.IntN(3000)) * time.Millisecond
		if r := in.c.recv; r != nil && in.rng.IntN(4) == 0 {
			in.spawn(func() { in.killReceiver(ctx, r, down) })
			return
		}
		if b := in.lockBox(func() *box { return in.pickBox(true) }); b != nil {
			in.spawn(func() { in.kill(ctx, b, down) })
		} else {
			in.rec.Debug("kill skipped: every box picked was busy")
		}
	case faultFailpoint:
		point, p := edgeFailpoints[in.rng.IntN(len(edgeFailpoints))], 0.2 // per batch
		pick := func() *box { edges := in.c.edges(); return edges[in.rng.IntN(len(edges))] }
		if in.rng.IntN(6) == 0 {
			point, p = l1Failpoint, 0.02 // per receipt applied
			pick = func() *box { return in.c.boxes["l1"] }
			if in.o.Cleanup && in.rng.IntN(2) == 0 {
				point, p = l1CleanupFailpoint, 0.3 // per pass that wrote audit records
			}
		}
		if b := in.lockBox(pick); b != nil {
			in.spawn(func() { in.failpoint(ctx, b, point, p) })
		} else {
			in.rec.Debug("failpoint %s skipped: busy", point)
		}
	case faultLinkCut:
		l := in.pickLink()
		if l == nil {
			in.rec.Debug("link cut skipped: every link is cut")
			return
		}
		var d time.Duration
		switch x := in.rng.IntN(10); {
		case x < 6:
			d = time.Second + time.Duration(in.rng.IntN(9000))*time.Millisecond
		case x < 9:
			d = 10*time.Second + time.Duration(in.rng.IntN(35))*time.Second
		default:
			d = 45*time.Second + time.Duration(in.rng.IntN(55))*time.Second
		}
		in.spawn(func() { in.cut(ctx, l, d, false) })
	case faultPowerCut:
		down := time.Duration(in.rng.IntN(3000)) * time.Millisecond
		torn, seed := in.rng.IntN(2) == 0, in.rng.Uint64()
		if b := in.lockBox(in.pickPowerBox); b != nil {
			in.spawn(func() { in.powerCut(ctx, b, down, torn, seed) })
		} else {
			in.rec.Debug("power cut skipped: every box picked was busy")
		}
	case faultPause:
		d := time.Duration(float64(o.AckWait) * (1.2 + 1.8*in.rng.Float64()))
		if b := in.lockBox(func() *box { return in.pickBox(false) }); b != nil {
			in.spawn(func() { in.pause(ctx, b, d) })
		}
	case faultNetns:
		d := 3*time.Second + time.Duration(in.rng.IntN(40))*time.Second
		if in.c.ns.busy.CompareAndSwap(false, true) {
			in.spawn(func() { in.nsCut(ctx, d) })
		}
	case faultReplace, faultRollback:
		in.randomLifecycle(ctx, kind)
	}
}

func (in *injector) spawn(f func()) {
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		f()
	}()
}

// lockBox tries up to three picks and returns the first box whose lock it
// took, or nil.
func (in *injector) lockBox(pick func() *box) *box {
	for range 3 {
		if b := pick(); b.mu.TryLock() {
			return b
		}
	}
	return nil
}

// pickEdge chooses an edge.
func (in *injector) pickEdge() *box {
	edges := in.c.edges()
	return edges[in.rng.IntN(len(edges))]
}

// pickBox chooses a box: an edge 60% of the time, else the hub or (when
// withL1) L1.
func (in *injector) pickBox(withL1 bool) *box {
	edges := in.c.edges()
	x := in.rng.IntN(10)
	switch {
	case x < 6:
		return edges[in.rng.IntN(len(edges))]
	case x < 8 || !withL1:
		return in.c.boxes["hub"]
	default:
		return in.c.boxes["l1"]
	}
}

// pickLink chooses a link that is not cut at the moment and marks it busy.
func (in *injector) pickLink() *link {
	ls := slices.Clone(in.c.links)
	in.rng.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
	for _, l := range ls {
		if l.busy.CompareAndSwap(false, true) {
			return l
		}
	}
	return nil
}

// killReceiver SIGKILLs the http sink's target, keeps it down for down,
// and restarts it.
func (in *injector) killReceiver(ctx context.Context, r *receiver.Receiver, down time.Duration) {
	ok, err := r.Kill(ctx, down)
	if !ok {
		in.rec.Debug("receiver kill skipped: busy")
		return
	}
	in.rec.Fault(faultKill, "receiver", down)
	if err != nil {
		in.rec.Info("restart of the receiver after a kill: %v", err)
	}
}

// kill SIGKILLs the box, keeps it down for down, and restarts it.
func (in *injector) kill(ctx context.Context, b *box, down time.Duration) {
	defer b.mu.Unlock()
	if b.running() == nil {
		return // being restarted after another death
	}
	b.stop(syscall.SIGKILL, 10*time.Second)
	in.rec.Fault(faultKill, b.name, down)
	ctxsleep.For(ctx, down)
	if err := b.start(context.Background(), b.env()); err != nil {
		in.rec.Info("restart of %s after a kill: %v", b.name, err)
	}
}

// failpoint restarts the box (SIGTERM) with one failpoint armed and waits
// for it to kill the process; the watcher then records the kill (from the
// box's log) and restarts the box unarmed. The box is released while the
// armed process runs, so other faults may hit it meanwhile (a kill of the
// armed process disarms it too). If the point is not hit within 30s (no
// traffic reaches it), the box is restarted unarmed.
func (in *injector) failpoint(ctx context.Context, b *box, point string, p float64) {
	if b.running() == nil {
		b.mu.Unlock()
		return
	}
	b.stop(syscall.SIGTERM, 20*time.Second)
	env := append(slices.Clone(b.env()), "LEAFLINE_FAILPOINTS="+point+"=kill@"+strconv.FormatFloat(p, 'g', -1, 64))
	err := b.start(context.Background(), env)
	armed := b.running()
	b.mu.Unlock()
	if err != nil || armed == nil {
		if err != nil {
			in.rec.Info("start of %s with %s armed: %v", b.name, point, err)
		}
		return
	}
	select {
	case <-armed.done:
		return
	case <-time.After(30 * time.Second):
		in.rec.Debug("failpoint %s on %s not hit within 30s; disarming", point, b.name)
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running() != armed {
		return // died or was replaced meanwhile
	}
	b.stop(syscall.SIGTERM, 20*time.Second)
	if err := b.start(context.Background(), b.env()); err != nil {
		in.rec.Info("restart of %s after disarming %s: %v", b.name, point, err)
	}
}

// cut cuts the link for d (or until the fault phase ends).
func (in *injector) cut(ctx context.Context, l *link, d time.Duration, long bool) {
	defer l.busy.Store(false)
	t0 := time.Now()
	l.proxy.Cut()
	in.rec.Debug("link %s cut for %s", l.name, d)
	ctxsleep.For(ctx, d)
	l.proxy.Restore()
	note := ""
	if long {
		note = "long"
	}
	in.rec.FaultNote(faultLinkCut, l.name, time.Since(t0), note)
}

// pause SIGSTOPs the box for d, then SIGCONTs it.
func (in *injector) pause(ctx context.Context, b *box, d time.Duration) {
	defer b.mu.Unlock()
	p := b.running()
	if p == nil {
		return
	}
	t0 := time.Now()
	p.paused.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	ctxsleep.For(ctx, d)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.paused.Store(false)
	in.rec.Fault(faultPause, b.name, time.Since(t0))
}

// nsCut takes the veth link of edge1-hub down for d: packets are dropped
// and connections hang, unlike the proxy cut, which closes them.
func (in *injector) nsCut(ctx context.Context, d time.Duration) {
	ns := in.c.ns
	defer ns.busy.Store(false)
	t0 := time.Now()
	if err := ns.cut(); err != nil {
		in.rec.Info("netns cut: %v", err)
		return
	}
	ctxsleep.For(ctx, d)
	// Does edge1 notice? A black-holed link stays "connected" until the
	// leafnode's pings time out.
	note := ""
	if _, r, _, err := in.c.boxes["edge1"].readyz(); err == nil && r.UpstreamConnected != nil && *r.UpstreamConnected {
		note = "edge1 still reported its upstream connected at the end"
	}
	if err := ns.restore(); err != nil {
		in.rec.Finding("netns restore failed: %v", err)
	}
	in.rec.FaultNote(faultNetns, "edge1-hub(veth)", time.Since(t0), note)
}

func fmtBytes(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// faultTotals counts the faults injected: all, kills (a process killed
// by signal or failpoint), link cuts (proxy or netns) and long cuts.
func faultTotals(rec *faultlog.Log) (total, kills, cuts, longCuts int) {
	return rec.Count(), rec.Count(faultKill, faultFailpoint), rec.Count(faultLinkCut, faultNetns), rec.Notes("long")
}
