//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/cmd/leafline-chaos/internal/check"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/faultlog"
	"github.com/leafline/leafline/completion/state"
	"github.com/leafline/leafline/internal/ctxsleep"
)

// result is what a run found.
type result struct {
	Seed                 uint64
	Duration             time.Duration
	Events               int
	Acked, Unknown       int
	Faults               int
	Kills, Cuts          int
	PowerCuts            int
	LongCuts             int
	Lost                 int
	DuplicateCompletions int
	DupKV, DupMetric     int
	Phantoms             int
	Regressions          int
	// ExpiredConflicts: events an edge reported expired and also with
	// another terminal status.
	ExpiredConflicts   int
	MaxDrainS          float64
	DrainComplete      bool
	DuplicatesAbsorbed int
	Findings           []string
	// TargetChecked is how many events edge1 reported that the http
	// sink's receiver was checked for; TargetMissing, how many it lacks.
	TargetChecked, TargetMissing int
	// FilesChecked is how many events the edges with a file sink reported
	// that their sink's directory was checked for; FilesMissing, how many
	// files are not there: work lost behind a receipt.
	FilesChecked, FilesMissing int
	// FilesGone is how many of those files a replace or a rollback of
	// their edge destroyed with its data dir (not counted as missing).
	FilesGone int
	FinalLine string
	// Released is the most the hub's counter of released events showed
	// (by edge, summed); Resent what L1 sent again to released edges;
	// UpstreamChanges the replaced or rolled-back upstream streams the
	// relay links took again (both summed over restarts, lower bounds).
	Released, Resent, UpstreamChanges float64
	Parks, Replaces, Rollbacks        int
	// Redrives: overdue events L1 published again (a hop lost them or
	// their receipts); -1 when unknown (a recheck).
	Redrives int
	Dir      string
	// Cleanup is the check of L1A's cleanup (--cleanup).
	Cleanup *cleanupVerdict
}

func (r *result) violation() bool {
	return r.Lost > 0 || r.DuplicateCompletions > 0 || r.Phantoms > 0 || r.Regressions > 0 || r.ExpiredConflicts > 0 || r.FilesMissing > 0 ||
		(r.Cleanup != nil && r.Cleanup.violation())
}

func (r *result) exitCode(err error) int {
	switch {
	case r == nil:
		return exitHarness
	case r.violation():
		return exitViolation
	case err != nil:
		return exitHarness
	case len(r.Findings) > 0:
		return exitFaultChk
	}
	return exitOK
}

// resultOf is the result of a run of o whose checker concluded v.
func resultOf(o options, v check.Verdict, dir string) *result {
	return &result{Seed: o.Seed, Duration: o.Duration, Events: v.Published, Acked: v.Acked, Unknown: v.Unknown,
		Lost: v.Lost, DupKV: v.DupKV, Phantoms: v.Phantoms, Regressions: v.Regressions, ExpiredConflicts: v.ExpiredConflicts,
		DuplicatesAbsorbed: v.DuplicatesAbsorbed, Dir: dir}
}

// finalLine is the one line that sums the run up.
func (r *result) finalLine() string {
	return fmt.Sprintf("chaos seed=%d duration=%s events=%d faults=%d lost=%d duplicate_completions=%d phantoms=%d max_drain_s=%.1f",
		r.Seed, r.Duration, r.Events, r.Faults, r.Lost, r.DuplicateCompletions, r.Phantoms, r.MaxDrainS)
}

// run sets up the system, injects faults for o.Duration, heals, waits for
// the drain and checks. It returns a nil result only when it could not
// check anything.
func run(ctx context.Context, o options) (*result, error) {
	dir, cleanup, err := workDir(o)
	if err != nil {
		return nil, err
	}
	rec := faultlog.New(o.Stderr, o.Verbose, filepath.Join(dir, "chaos.log"))
	defer rec.Close()
	rec.Info("chaos seed=%d duration=%s rate=%d/s edges=%d sink=%s faults=%s negative_control=%t unsafe_sync=%t dir=%s",
		o.Seed, o.Duration, o.Rate, o.Edges, o.Sink, faultList(o.Faults), o.NegativeControl, o.UnsafeSync, dir)

	bin := o.Bin
	if bin == "" {
		rec.Info("building leafline")
		if bin, err = buildLeafline(ctx, dir); err != nil {
			return nil, err
		}
	}
	c, err := newSystem(ctx, o, dir, bin, rec)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.startAll(ctx); err != nil {
		return nil, err
	}
	s, err := watchL1(ctx, c, rec)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if s.hist, err = newHistory(filepath.Join(dir, "history.jsonl")); err != nil {
		return nil, err
	}
	defer s.hist.close()

	runErr := s.faultPhase(ctx)
	runErr = errors.Join(runErr, s.heal(ctx))
	states := s.hist.snapshot()
	drainS, complete := drain(ctx, o, s.obs, states, rec)
	rec.Info("drain: %s after %.1fs", map[bool]string{true: "complete", false: "INCOMPLETE"}[complete], drainS)
	if complete {
		reportStreams(context.WithoutCancel(ctx), c, rec)
	}
	res, err := s.conclude(context.WithoutCancel(ctx), states, drainS, complete)
	runErr = errors.Join(runErr, err)
	if res.violation() || runErr != nil || len(res.Findings) > 0 || o.Keep || o.Dir != "" {
		c.keep.Store(true)
		rec.Info("kept %s (configs, logs, history.jsonl, chaos.log)", dir)
	} else {
		defer cleanup()
	}
	return res, runErr
}

// session is one run's checking side: the driver's connection to L1, the
// watch on its completion log, L1's counters and the publish history.
type session struct {
	o     options
	c     *system
	rec   *faultlog.Log
	nc    *nats.Conn
	js    jetstream.JetStream
	obs   *check.Observer
	l1acc *counterAcc
	hist  *history
	stop  context.CancelFunc // stops the watch and the counters
	// released follows the hub's releases (park); links, the upstream
	// changes seen by the hub's and the edges' links (replace, rollback).
	released *releases
	links    []*counterAcc
}

// watchL1 connects to L1, waits for its completion log and every link, and
// starts following the log and L1's counters.
func watchL1(ctx context.Context, c *system, rec *faultlog.Log) (*session, error) {
	l1 := c.boxes["l1"]
	nc, err := nats.Connect("nats://"+l1.natsAddr, nats.Name("chaos-checker"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.RetryOnFailedConnect(true), nats.ErrorHandler(asyncErrors(rec, "checker")))
	if err != nil {
		return nil, err
	}
	s := &session{o: c.o, c: c, rec: rec, nc: nc, stop: func() {}}
	if s.js, err = jetstream.New(nc); err == nil {
		err = completionLog(ctx, s.js)
	}
	if err == nil {
		err = waitLinks(ctx, c, 60*time.Second)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	var edgeNames []string
	for _, e := range c.edges() {
		edgeNames = append(edgeNames, e.name)
	}
	s.obs = check.NewObserver(edgeNames)
	var watchCtx context.Context
	watchCtx, s.stop = context.WithCancel(ctx)
	go s.obs.Watch(watchCtx, s.js, rec.Debug)
	s.l1acc = newCounterAcc(l1, "leafline_completion_applied_total", "leafline_completion_duplicates_total", "leafline_completion_redriven_total",
		"leafline_completion_resent_total", upstreamChangesMetric)
	go s.l1acc.run(watchCtx, time.Second)
	l1.beforeStop = s.l1acc.scrapeNow
	s.released = newReleases(c.boxes["hub"])
	if c.o.Faults[faultPark] {
		go s.released.run(watchCtx, 2*time.Second)
	}
	if c.o.Faults[faultReplace] || c.o.Faults[faultRollback] {
		for _, n := range c.order[1:] {
			a := newCounterAcc(c.boxes[n], upstreamChangesMetric)
			s.links = append(s.links, a)
			go a.run(watchCtx, 2*time.Second)
		}
	}
	return s, nil
}

func (s *session) close() {
	s.stop()
	s.nc.Close()
}

// faultPhase publishes at L1 and injects faults for o.Duration, logging
// progress, and stops both.
func (s *session) faultPhase(ctx context.Context) error {
	o, rec := s.o, s.rec
	pub := &publisher{h: s.hist, url: "nats://" + s.c.boxes["l1"].natsAddr, rate: o.Rate, rec: rec}
	pubCtx, stopPub := context.WithCancel(ctx)
	pubDone := make(chan error, 1)
	go func() { pubDone <- pub.run(pubCtx) }()

	in := &injector{c: s.c, o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x1eaf)), rec: rec, l1acc: s.l1acc, released: s.released}
	faultCtx, stopFaults := context.WithTimeout(ctx, o.Duration)
	injDone := make(chan struct{})
	go func() { in.run(faultCtx); close(injDone) }()
	progress := time.NewTicker(o.progressEvery)
	defer progress.Stop()
	var runErr error
phase:
	for {
		select {
		case <-faultCtx.Done():
			break phase
		case err := <-s.c.fatal:
			runErr = err
			break phase
		case <-progress.C:
			missing, complete := s.obs.Remaining(s.hist.snapshot())
			total, kills, cuts, _ := faultTotals(rec)
			rec.Info("published=%d acked=%d unknown=%d complete=%d incomplete_acked=%d faults=%d (kills %d, cuts %d)",
				s.hist.published.Load(), s.hist.acked.Load(), s.hist.unknown.Load(), complete, missing, total, kills, cuts)
		}
	}
	stopFaults()
	<-injDone
	in.checkParks()
	stopPub()
	if err := <-pubDone; err != nil && runErr == nil {
		runErr = fmt.Errorf("publisher: %w", err)
	}
	if ctx.Err() != nil {
		runErr = errors.Join(runErr, ctx.Err())
	}
	return runErr
}

// heal brings every link up and every box running (unarmed in the
// negative control).
func (s *session) heal(ctx context.Context) error {
	s.rec.Info("fault phase over: healing")
	ctx = context.WithoutCancel(ctx)
	if s.o.NegativeControl {
		for _, e := range s.c.edges() {
			e.setEnv(nil)
			e.stop(syscall.SIGTERM, 20*time.Second)
			if err := e.start(ctx, nil); err != nil {
				s.rec.Info("restart of %s without failpoints: %v", e.name, err)
			}
		}
	}
	var err error
	if herr := s.c.heal(ctx); herr != nil {
		err = fmt.Errorf("heal: %w", herr)
	}
	if werr := waitLinks(ctx, s.c, 60*time.Second); werr != nil {
		s.rec.Finding("after healing: %v", werr)
	}
	return err
}

// conclude reads the whole completion history and L1's counters once
// more, checks the sinks, prints the report and returns the result.
func (s *session) conclude(ctx context.Context, states []byte, drainS float64, complete bool) (*result, error) {
	o, rec, c := s.o, s.rec, s.c
	s.stop()
	s.l1acc.scrapeNow()
	var runErr error
	n, err := s.obs.ReadAll(ctx, s.js)
	if err != nil {
		runErr = fmt.Errorf("final read of the completion history: %w", err)
	}
	rec.Debug("final read: %d revisions", n)
	v := s.obs.Verdict(states)
	var targetChecked, targetMissing int
	if c.recv != nil {
		targetChecked, targetMissing = checkReceiver(c.recv, s.obs, rec)
	}
	filesChecked, filesMissing, filesGone := checkFileSinks(c, s.obs, rec)

	res := resultOf(o, v, c.dir)
	res.MaxDrainS, res.DrainComplete = drainS, complete
	res.TargetChecked, res.TargetMissing, res.FilesChecked, res.FilesMissing = targetChecked, targetMissing, filesChecked, filesMissing
	res.FilesGone = filesGone
	s.lifecycleFigures(res)
	applied := int(math.Round(s.l1acc.total("leafline_completion_applied_total")))
	res.DupMetric = max(0, applied-v.TerminalRecords)
	res.DuplicateCompletions = max(res.DupKV, res.DupMetric)
	res.Faults, res.Kills, res.Cuts, res.LongCuts = faultTotals(rec)
	res.PowerCuts = rec.Count(faultPowerCut)
	res.Findings = append(res.Findings, rec.Findings()...)
	res.FinalLine = res.finalLine()
	if len(c.power) > 0 {
		res.FinalLine += fmt.Sprintf(" powercuts=%d", res.PowerCuts)
	}
	if res.FilesChecked > 0 {
		res.FinalLine += fmt.Sprintf(" file_sink_missing=%d", res.FilesMissing)
	}
	if o.Cleanup {
		runErr = errors.Join(runErr, s.checkCleanup(ctx, res))
	}
	res.Redrives = int(math.Round(s.l1acc.total("leafline_completion_redriven_total")))
	report(o.Stdout, o, rec, res, v, applied, s.l1acc.total("leafline_completion_duplicates_total"), n, s.obs.Revisions())
	return res, runErr
}

// lifecycleFigures adds the hub's releases, L1's resends and the links'
// upstream changes to res.
func (s *session) lifecycleFigures(res *result) {
	res.Parks, res.Replaces, res.Rollbacks = s.rec.Count(faultPark), s.rec.Count(faultReplace), s.rec.Count(faultRollback)
	res.Released = s.released.total()
	res.Resent = s.l1acc.total("leafline_completion_resent_total")
	res.UpstreamChanges = s.l1acc.total(upstreamChangesMetric)
	for _, a := range s.links {
		a.scrapeNow()
		res.UpstreamChanges += a.total(upstreamChangesMetric)
	}
}

// checkCleanup checks that every message L1's cleanup deleted has an
// audit record of a done event, and adds the figures to res.
func (s *session) checkCleanup(ctx context.Context, res *result) error {
	cv, err := checkCleanup(ctx, s.js, "L1A", s.obs)
	if err != nil {
		return fmt.Errorf("cleanup check: %w", err)
	}
	res.Cleanup = &cv
	res.FinalLine += fmt.Sprintf(" cleaned=%d unaudited=%d", cv.audited, cv.unaudited)
	for _, e := range cv.examples {
		fmt.Fprintf(s.o.Stdout, "cleanup: %s\n", e)
	}
	fmt.Fprintf(s.o.Stdout, "cleanup: %d L1A messages deleted, %d audit records (%d not yet deleted), %d of events not done\n",
		cv.deleted, cv.audited, cv.pending, cv.incomplete)
	return nil
}

func workDir(o options) (string, func(), error) {
	if o.Dir != "" {
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return "", nil, err
		}
		abs, err := filepath.Abs(o.Dir)
		return abs, func() {}, err
	}
	d, err := os.MkdirTemp("", "leafline-chaos-")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// completionLog waits for L1's completion log, which holds every record
// L1 ever wrote (entries are never removed), so that the final read sees
// whether a first terminal record was ever overwritten.
func completionLog(ctx context.Context, js jetstream.JetStream) error {
	var err error
	for i := 0; i < 100; i++ {
		if _, err = js.Stream(ctx, state.DefaultLogStream); err == nil {
			return nil
		}
		ctxsleep.For(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("completion log %s: %w", state.DefaultLogStream, err)
}

// waitLinks waits until the hub and every edge report their upstream link up.
func waitLinks(ctx context.Context, c *system, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var down []string
		for _, n := range c.order {
			b := c.boxes[n]
			if b.role == "l1" {
				continue
			}
			_, r, _, err := b.readyz()
			if err != nil || r.UpstreamConnected == nil || !*r.UpstreamConnected {
				down = append(down, b.name)
			}
		}
		if len(down) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("upstream link of %s not up after %s", strings.Join(down, ", "), timeout)
		}
		ctxsleep.For(ctx, 250*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// drain waits until every PubAck'ed event is complete at L1, the timeout
// passes, or nothing completes for o.DrainStall.
func drain(ctx context.Context, o options, obs *check.Observer, states []byte, rec *faultlog.Log) (float64, bool) {
	start := time.Now()
	lastMissing, lastChange := -1, time.Now()
	lastLog := time.Now()
	for {
		missing, complete := obs.Remaining(states)
		if missing == 0 {
			return time.Since(start).Seconds(), true
		}
		if missing != lastMissing {
			lastMissing, lastChange = missing, time.Now()
		}
		switch {
		case time.Since(start) > o.DrainTimeout:
			rec.Info("drain: timed out after %s with %d PubAck'ed events incomplete", o.DrainTimeout, missing)
			return time.Since(start).Seconds(), false
		case time.Since(lastChange) > o.DrainStall:
			rec.Info("drain: nothing completed for %s; %d PubAck'ed events incomplete", o.DrainStall, missing)
			return time.Since(start).Seconds(), false
		case ctx.Err() != nil:
			return time.Since(start).Seconds(), false
		}
		if time.Since(lastLog) >= o.progressEvery {
			lastLog = time.Now()
			rec.Info("drain: %d PubAck'ed events incomplete, %d complete", missing, complete)
		}
		ctxsleep.For(ctx, 500*time.Millisecond)
	}
}

func report(w io.Writer, o options, rec *faultlog.Log, res *result, v check.Verdict, applied int, dupMetric float64, finalRevs, allRevs int) {
	fmt.Fprintln(w)
	rec.Table(w)
	fmt.Fprintf(w, "  totals: %d faults; %d kills (SIGKILL and failpoint); %d link cuts (%d longer than %s); %d power cuts\n",
		res.Faults, res.Kills, res.Cuts, res.LongCuts, o.LongCut, res.PowerCuts)
	fmt.Fprintf(w, "events: published=%d acked=%d unknown=%d (unknown and complete: %d)\n", v.Published, v.Acked, v.Unknown, v.CompleteUnknown)
	fmt.Fprintf(w, "completions: records=%d terminal_records=%d complete_acked=%d\n", v.Records, v.TerminalRecords, v.CompleteAcked)
	if o.Sink == "http" {
		fmt.Fprintf(w, "http target: holds %d of the %d events L1 records as processed by edge1\n", res.TargetChecked-res.TargetMissing, res.TargetChecked)
	}
	if res.FilesChecked > 0 {
		fmt.Fprintf(w, "file sinks: hold %d of the %d events L1 records as processed by their edges", res.FilesChecked-res.FilesMissing, res.FilesChecked)
		if res.FilesGone > 0 {
			fmt.Fprintf(w, " (and %d more whose files a replace or a rollback destroyed with the edge's data dir, not checked)", res.FilesGone)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "duplicates absorbed: %d (sum of the records' duplicates), %.0f (L1 metric leafline_completion_duplicates_total, summed over L1 restarts)\n",
		v.DuplicatesAbsorbed, dupMetric)
	if applied > 0 {
		fmt.Fprintf(w, "duplicate completions: log=%d metric_bound=%d (applied_total=%d over L1 restarts vs %d terminal records; a lower bound: counts since the last scrape die with an unplanned L1 kill)\n",
			res.DupKV, res.DupMetric, applied, v.TerminalRecords)
	} else {
		fmt.Fprintf(w, "duplicate completions: log=%d (no metric bound: L1's applied counter was not scraped)\n", res.DupKV)
	}
	fmt.Fprintf(w, "history: %d records seen (live watch + final read of the completion log's %d entries)\n", allRevs, finalRevs)
	if res.Redrives >= 0 {
		fmt.Fprintf(w, "redrives: %d (L1 metric leafline_completion_redriven_total, summed over L1 restarts: events L1 published again because the edge had reported later ones; a hop lost them or their receipts, or they were retried behind later ones)\n", res.Redrives)
	}
	reportLifecycle(w, o, res)
	fmt.Fprintf(w, "drain: %.1fs (%s)\n", res.MaxDrainS, map[bool]string{true: "complete", false: "INCOMPLETE"}[res.DrainComplete])
	section := func(title string, lines []string) {
		if len(lines) == 0 {
			return
		}
		fmt.Fprintf(w, "%s:\n", title)
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	section("LOST (PubAck'ed at L1 or reported by an edge, not complete)", v.LostExamples)
	section("DUPLICATE COMPLETIONS", v.DupExamples)
	section("PHANTOMS", v.PhantomExamples)
	section("REGRESSIONS", v.RegressionExamples)
	section("EXPIRED AND ALSO ANOTHER STATUS", v.ExpiredConflictExamples)
	section("undecodable records", v.DecodeErrors)
	section("FINDINGS (fault checks)", res.Findings)
	if o.UnsafeSync {
		if res.Lost > 0 {
			fmt.Fprintf(w, "negative control (--unsafe-sync): the checker saw the loss (lost=%d) after %d power cuts, as it must\n", res.Lost, res.PowerCuts)
		} else {
			fmt.Fprintf(w, "negative control (--unsafe-sync): NO LOSS SEEN after %d power cuts: forgetfs kept unsynced data, or the cuts missed every unsynced write\n", res.PowerCuts)
		}
	}
	if o.FileNoDirSync {
		if res.FilesMissing > 0 {
			fmt.Fprintf(w, "negative control (--file-no-dir-sync): the checker saw the loss (file_sink_missing=%d) after %d power cuts, as it must\n", res.FilesMissing, res.PowerCuts)
		} else {
			fmt.Fprintf(w, "negative control (--file-no-dir-sync): NO LOSS SEEN after %d power cuts: no cut came between a file's rename and the next sync of its directory\n", res.PowerCuts)
		}
	}
	if o.NegativeControl {
		if res.Lost > 0 {
			fmt.Fprintf(w, "negative control: the checker saw the loss (lost=%d), as it must\n", res.Lost)
		} else {
			fmt.Fprintf(w, "negative control: NO LOSS SEEN: the checker (or the failpoint) is broken\n")
		}
	}
	fmt.Fprintln(w, res.FinalLine)
}

// reportLifecycle says what the park, replace and rollback faults made
// the system do.
func reportLifecycle(w io.Writer, o options, res *result) {
	if o.Faults[faultPark] {
		fmt.Fprintf(w, "park: the hub released %.0f events of its edges past their backlog budget of %s (%s, largest seen); L1 sent %.0f again to them alone (leafline_completion_resent_total, summed over L1 restarts)\n",
			res.Released, fmtBytes(parkBudget(o)), releasedMetric, res.Resent)
	}
	if o.Faults[faultReplace] || o.Faults[faultRollback] {
		fmt.Fprintf(w, "replace/rollback: the relay links took a replaced or rolled-back upstream stream again %.0f times (%s, summed over boxes and restarts)\n",
			res.UpstreamChanges, upstreamChangesMetric)
	}
}

// trimmedStreams are the streams each role's box trims (the default names
// of the topology the driver writes).
var trimmedStreams = map[string][]string{"l1": {"R1"}, "hub": {"HA", "RH"}, "edge": {"L2A", "RE"}}

// reportStreams says, once everything is completed, how much each trimmed
// stream still holds of what it stored: the boxes delete what the next hop
// has, so after a few seconds that is nothing, whatever the faults did.
func reportStreams(ctx context.Context, c *system, rec *faultlog.Log) {
	js := map[string]jetstream.JetStream{}
	for _, n := range c.order {
		nc, err := nats.Connect("nats://"+c.boxes[n].natsAddr, nats.Name("chaos-streams"))
		if err != nil {
			rec.Info("trimmed streams: %s: %v", n, err)
			continue
		}
		defer nc.Close()
		if js[n], err = jetstream.New(nc); err != nil {
			rec.Info("trimmed streams: %s: %v", n, err)
			delete(js, n)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var parts []string
		held := uint64(0)
		for _, n := range c.order {
			b := c.boxes[n]
			for _, name := range trimmedStreams[b.role] {
				st, err := streamState(ctx, js[n], name)
				if err != nil {
					parts = append(parts, fmt.Sprintf("%s@%s: %v", name, b.name, err))
					continue
				}
				held += st.Msgs
				parts = append(parts, fmt.Sprintf("%s@%s %d/%d", name, b.name, st.Msgs, st.LastSeq))
			}
		}
		if held == 0 || time.Now().After(deadline) {
			rec.Info("trimmed streams after the drain (held/stored): %s", strings.Join(parts, ", "))
			return
		}
		time.Sleep(time.Second)
	}
}

func streamState(ctx context.Context, js jetstream.JetStream, stream string) (jetstream.StreamState, error) {
	if js == nil {
		return jetstream.StreamState{}, errors.New("no connection")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return jetstream.StreamState{}, err
	}
	return s.CachedInfo().State, nil
}
