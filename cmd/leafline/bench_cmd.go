package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leafline/leafline/cmd/leafline/internal/bench"
	"github.com/leafline/leafline/cmd/leafline/internal/sinkbench"
	"github.com/leafline/leafline/topology"
)

// benchUsage heads `leafline bench --help`.
const benchUsage = `usage: leafline bench [flags]

Measures leafline on this machine, in this process, SyncAlways on every
server: the phases below, then a table and a final line
  bench leafline_eps=… e2e_eps=… flushes_per_event=… drain_eps=… …
with the figures of the phases that ran.

phases (--only, comma-separated, by letter or name; default all of them):
  k  (signing) CPU cost of signing and verifying receipts
  z  (fsync) the disk's fsync ceiling (1 and 16 writers)
  l1 L1 alone: --l1-events events and both receipts each, written to L1
     (origins, then receipts, one message each and in bundles) and applied
     by the completion service (events/s against the receipt ceiling, CPU
     and disk flushes per event); the CPU per event from 10k and at
     --l1-tracked events tracked; summary p99
  s  (publish) L1 publish and L1->hub sourcing under SyncAlways
  a  (consume) raw consume of an edge backlog (Fetch+Ack)
  b  (receipts) receipt ceiling: atomic batch publish of receipts
  c  (naive) naive loop: one commit, publish and ACK per event
  d  (runner) the sink runner draining a backlog (store and file sinks)
  f  (drain) drain: an edge's receipts backlog after a cut link, to L1
  e  (e2e) end to end: published at L1 until completed at L1
  l  (restore) link restore: the edge link cut --cuts times for --cut-for while
     events flow at --restore-rate; restore -> first receipt of the cut
     recorded at L1 (p50/p99/max), and flow-control stall warnings
  F  (fleet) fleet: one hub, --fleet-edges edges, --fleet-events each published
     while every edge link is cut for --fleet-cut; drain time, process
     CPU per 1k receipts, disk flushes per receipt; then the same with
     one edge stopped (parked): fleet_parked_ratio, the drain all up over
     the others' drain with one parked (1 or more: no slower)
  wire  bytes on the edge link per event down and per receipt up, with
     compression off, s2_fast and s2_best (--wire events each, on the
     first --transport)
  cap  the edge link capped at 64KB/s (64,000 bytes a second) each way,
     over the relay, with a backlog both ways: the message bytes it
     carries down and up over --cap-window, and cap_error_pct, how far
     the rate is from the cap
  expiry  --expiry events that go stale behind a cut edge link (expire_after
     2s): each must end expired at L1 once, none processed, none pending
  priority  --priority-backlog normal events at the hub behind a cut edge
     link, then --urgent urgent events published once a second after the
     restore, with the class urgent and without classes: publish to
     complete at L1 (urgent_p99_ms, urgent_p99_ms_no_priority), and normal
     work's share while urgent events flow at 10% of the rate
  park  two edges over the relay, the hub's streams --park-stream-mib:
     --park-events events of --park-size bytes with both edges up, then as
     many with edge2 stopped (past its backlog budget at the hub): edge1's
     rate in each (park_ratio, parked over both), then edge2 started and
     timed until it has caught up; every event complete once for both
  replace  two edges over the relay: edge1 replaced (data dir wiped), the
     hub replaced, edge1 rolled back, the hub rolled back (data dir
     restored from a copy); --replace-before events before each change,
     --replace-after after it, timed from the box's ready until complete
     at L1 for both edges; every event complete once
  sites  two edges over the relay, edge2 not yet in the topology: L1 and
     the hub reload the topology with it, edge2 starts, timed from its ready
     to its first completion; then edge2 stopped, --sites-pending events
     published, edge2 retired by a reload, timed until L1 closed them all
  memory  l1, a hub and two edges as four leafline processes (relay,
     store sinks): --memory events of --memory-size bytes until complete
     at L1, each box under its role's default memory limit and under
     none, a tenth as many, and 1.1 GiB of events with edge2 parked; each
     process's peak anonymous and file-backed memory, its heap after a
     GC, the rates with and without the limits
  origin  the same four processes with L1's jetstream.max_stream_bytes
     --origin-stream-mib and every other setting its default: --origin
     events of 1 KiB (five times the cap) published as fast as they go
     until complete at L1; refused, lost, L1A's peak against its cap,
     the cleanup's deletes against its audit records
  r  (rss) peak RSS of an edge run as a separate leafline process
  sinks  each sink side by side (--sinks, --events); only when named,
         or when --sinks is given without --only

f, e, l and F run once per --transport. The leafline phases need Linux.

Before the first phase a line gives the run's wall time, estimated from
the sizes. Each phase's default size takes at most a few minutes on a
2-core machine; --full sets the sizes of the figures a deployment is
sized on (e 50k events, f 100k, l 20 cuts, F 50 edges x 2000 events cut
for 2m: several minutes per transport). On a terminal, each phase draws a
line on stderr with its count, rate and time left; the table and the
final line go to stdout either way.

Ctrl-C or SIGTERM stops the bench within 5 s in any phase: its servers
stop, its temp dir is removed, and it exits 1.
`

// fullSizes are the sizes --full sets, flag and value in turn: those of
// the figures a deployment is sized on (several minutes per transport).
var fullSizes = []string{"--e2e", "50000", "--drain", "100000", "--cuts", "20", "--fleet-edges", "50", "--fleet-events", "2000", "--fleet-cut", "2m"}

// benchFlags are the flags of `leafline bench`.
type benchFlags struct {
	only, transport, ids, profile, dir           string
	compression                                  string
	backlog, size, file, naive, e2e, drain, prob int
	rss, batch, backlogBatch, wire, expiry       int
	priorityBacklog, urgent                      int
	parkEvents, parkSize, parkStreamMiB          int
	replaceBefore, replaceAfter, sitesPending    int
	l1Events, l1Tracked                          int
	memory, memorySize                           int
	origin, originStreamMiB                      int
	cuts, rate, fleetEdges, fleetEvents          int
	cutFor, fleetCut, capWindow                  time.Duration
	unsigned, insecure, verbose, full            bool
	// the sinks table
	events         int
	sinks, dsnEnv  string
	sinksGiven     bool
	onlyGiven      bool
	rssMemLimit    string
	rssProfile     string
	rssBinForBench string
}

func (f *benchFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.only, "only", "", "comma-separated `phases` to run (default: "+strings.Join(bench.Phases, ",")+")")
	fs.StringVar(&f.transport, "transport", "sourcing", "comma-separated link `transports` f, e, l and F run over ("+strings.Join(bench.Transports, ", ")+")")
	fs.StringVar(&f.compression, "compression", "", "leafnode compression of every link in every phase but wire ("+strings.Join(topology.CompressionModes, ", ")+"; empty: the topology default)")
	fs.IntVar(&f.backlog, "backlog", 200_000, "events preloaded for the runner (a-d)")
	fs.IntVar(&f.size, "size", 256, "event payload `bytes`")
	fs.IntVar(&f.file, "file", 20_000, "events for the file sink run (d2)")
	fs.IntVar(&f.naive, "naive", 5_000, "events for the naive loop (c)")
	fs.IntVar(&f.e2e, "e2e", 10_000, "events for end to end (e)")
	fs.IntVar(&f.drain, "drain", 20_000, "receipts accumulated during the cut (f)")
	fs.IntVar(&f.prob, "probe", 10_000, "events for the publish and sourcing probe (s)")
	fs.IntVar(&f.rss, "rss", 100_000, "backlog of the separate-process edge (r)")
	fs.IntVar(&f.wire, "wire", 2000, "events per compression mode (wire)")
	fs.IntVar(&f.expiry, "expiry", 1000, "events that go stale behind a cut link (expiry)")
	fs.IntVar(&f.priorityBacklog, "priority-backlog", 100_000, "normal events at the hub behind a cut link (priority)")
	fs.IntVar(&f.urgent, "urgent", 20, "urgent events timed, one a second (priority)")
	fs.DurationVar(&f.capWindow, "cap-window", time.Minute, "how long cap measures the capped link")
	fs.IntVar(&f.parkEvents, "park-events", 20_000, "events published in each of park's two sets (park)")
	fs.IntVar(&f.parkSize, "park-size", 8192, "payload `bytes` of park's events")
	fs.IntVar(&f.parkStreamMiB, "park-stream-mib", 64, "the hub's jetstream.max_stream_bytes in `MiB` during park (each edge's backlog budget is 3/4 of it)")
	fs.IntVar(&f.replaceBefore, "replace-before", 1000, "events completed before each box is replaced or rolled back (replace)")
	fs.IntVar(&f.replaceAfter, "replace-after", 1000, "events published and timed once the box is back (replace)")
	fs.IntVar(&f.sitesPending, "sites-pending", 500, "events pending for the edge that sites retires")
	fs.IntVar(&f.memory, "memory", 1_000_000, "events of memory's full runs")
	fs.IntVar(&f.memorySize, "memory-size", 256, "payload `bytes` of memory's events")
	fs.IntVar(&f.origin, "origin", 0, "events of origin (default five times its cap)")
	fs.IntVar(&f.originStreamMiB, "origin-stream-mib", 64, "L1's jetstream.max_stream_bytes in `MiB` during origin")
	fs.IntVar(&f.l1Events, "l1-events", 100_000, "events L1 applies alone (l1)")
	fs.IntVar(&f.l1Tracked, "l1-tracked", 1_000_000, "events tracked for l1's flat cost and summary")
	fs.IntVar(&f.cuts, "cuts", 20, "link cuts (l)")
	fs.DurationVar(&f.cutFor, "cut-for", 2*time.Second, "how long each link cut lasts (l)")
	fs.IntVar(&f.rate, "restore-rate", 100, "events published a second during l")
	fs.IntVar(&f.fleetEdges, "fleet-edges", 50, "edges of the fleet (F)")
	fs.IntVar(&f.fleetEvents, "fleet-events", 2000, "events routed to each edge of the fleet (F)")
	fs.DurationVar(&f.fleetCut, "fleet-cut", 30*time.Second, "how long every edge link of the fleet stays cut (F)")
	fs.IntVar(&f.batch, "batch", 0, "delivery.batch_size for every edge (0: the default)")
	fs.IntVar(&f.backlogBatch, "backlog-batch", 0, "delivery.backlog_batch_size for every edge (0: the default)")
	fs.StringVar(&f.ids, "ids", "random", "event ids: random (UUIDv4-like) or time (UUIDv7-like)")
	fs.BoolVar(&f.unsigned, "unsigned", false, "leave receipts unsigned")
	fs.BoolVar(&f.insecure, "insecure", false, "links over plain TCP, without mutual TLS")
	fs.StringVar(&f.profile, "profile", "", "write a CPU and a heap profile per phase into `DIR`")
	fs.StringVar(&f.rssMemLimit, "rss-memlimit", "", "GOMEMLIMIT for the edge process of r (empty: its default)")
	fs.StringVar(&f.rssProfile, "rss-profile", "", "write the r edge process's heap profile at its peak to `FILE`")
	fs.IntVar(&f.events, "events", 20000, "backlog each sink drains (sinks)")
	fs.StringVar(&f.sinks, "sinks", strings.Join(sinkbench.Names, ","), "comma-separated rows of the sinks table: "+strings.Join(sinkbench.Names, ", "))
	fs.StringVar(&f.dsnEnv, "postgres-dsn-env", "", "environment `VAR` holding a PostgreSQL connection string for the postgres row (unset: the row is skipped)")
	fs.StringVar(&f.dir, "dir", "", "keep the systems' data under `DIR` (default: a temp dir, removed)")
	fs.BoolVar(&f.verbose, "v", false, "log the boxes' warnings (sinks)")
	fs.BoolVar(&f.full, "full", false, "the full-size figures: "+strings.Join(fullSizes, " ")+" (a flag given as well wins)")
}

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", stderr)
	var f benchFlags
	f.define(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage, "\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "leafline bench: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	f.sinksGiven, f.onlyGiven = given["sinks"], given["only"]
	if f.full {
		for i := 0; i < len(fullSizes); i += 2 {
			if name := strings.TrimPrefix(fullSizes[i], "--"); !given[name] {
				_ = fs.Set(name, fullSizes[i+1])
			}
		}
	}
	phases := list(f.only)
	if !f.onlyGiven && f.sinksGiven {
		phases = []string{"sinks"}
	}
	runSinks := false
	if i := slices.Index(phases, "sinks"); i >= 0 {
		runSinks, phases = true, append(phases[:i:i], phases[i+1:]...)
	}
	code := exitOK
	if len(phases) > 0 || !runSinks {
		code = f.runPhases(ctx, phases, stdout, stderr)
	}
	if runSinks && code == exitOK {
		code = f.runSinks(ctx, stdout, stderr)
	}
	return code
}

// runPhases runs the leafline phases (all when phases is empty).
func (f *benchFlags) runPhases(ctx context.Context, phases []string, stdout, stderr io.Writer) int {
	o := bench.Options{
		Phases: phases, Transports: list(f.transport),
		Backlog: f.backlog, Size: f.size, File: f.file, Naive: f.naive, E2E: f.e2e, Drain: f.drain,
		Probe: f.prob, RSS: f.rss, Wire: f.wire, Expiry: f.expiry, PriorityBacklog: f.priorityBacklog, Urgent: f.urgent, L1Events: f.l1Events, L1Tracked: f.l1Tracked, Cuts: f.cuts, CutFor: f.cutFor, Rate: f.rate,
		FleetEdges: f.fleetEdges, FleetEvents: f.fleetEvents, FleetCut: f.fleetCut, CapWindow: f.capWindow,
		ParkEvents: f.parkEvents, ParkSize: f.parkSize, ParkStreamMiB: f.parkStreamMiB, ReplaceBefore: f.replaceBefore, ReplaceAfter: f.replaceAfter, SitesPending: f.sitesPending, Memory: f.memory, MemorySize: f.memorySize, Origin: f.origin, OriginStreamMiB: f.originStreamMiB, Batch: f.batch, BacklogBatch: f.backlogBatch, IDs: f.ids,
		Compression: f.compression, Unsigned: f.unsigned, Insecure: f.insecure, Profile: f.profile,
		RSSProfile: f.rssProfile, RSSMemLimit: f.rssMemLimit, Dir: f.dir, Out: stdout,
	}
	if isTerminal(stderr) {
		o.Progress = stderr
	}
	// The r phase runs this very binary as the edge process.
	if exe, err := os.Executable(); err == nil {
		o.RSSBin = exe
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "leafline bench: %v\n", err)
		return exitUsage
	}
	if _, err := bench.Leafline(ctx, o); err != nil {
		fmt.Fprintf(stderr, "leafline bench: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// runSinks runs the sinks table.
func (f *benchFlags) runSinks(ctx context.Context, stdout, stderr io.Writer) int {
	if f.events < 100 || f.events > 10_000_000 {
		fmt.Fprintf(stderr, "leafline bench: --events must be 100..10000000, got %d\n", f.events)
		return exitUsage
	}
	if f.size < 16 || f.size > 1<<20 {
		fmt.Fprintf(stderr, "leafline bench: --size must be 16..1048576, got %d\n", f.size)
		return exitUsage
	}
	o := sinkbench.Options{Events: f.events, Size: f.size, Dir: f.dir, Progress: stderr, Sinks: list(f.sinks)}
	if f.dsnEnv != "" {
		v, ok := os.LookupEnv(f.dsnEnv)
		if !ok || v == "" {
			fmt.Fprintf(stderr, "leafline bench: --postgres-dsn-env: environment variable %s is unset or empty\n", f.dsnEnv)
			return exitUsage
		}
		o.PostgresDSN = v
	}
	if f.verbose {
		o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rows, err := sinkbench.Run(ctx, o)
	sinkbench.Print(stdout, rows)
	if err != nil {
		fmt.Fprintf(stderr, "leafline bench: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// list splits a comma-separated flag value, dropping empty items.
func list(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// isTerminal reports whether w is a terminal (a character device): the
// progress lines are drawn there and nowhere else.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
