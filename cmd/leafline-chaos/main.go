//go:build linux

// Command chaos is leafline's fault-injection driver and history checker.
//
// It runs L1, a hub and one or two edges as real `leafline run` OS
// processes on loopback, publishes events at L1 at a steady rate while it
// injects faults (SIGKILLs, kills at named failpoints, link cuts, pauses, a
// full disk, a corrupted outbox, power cuts, an edge parked past its
// backlog budget at the hub, a box's data dir wiped or rolled back to an
// earlier backup), heals everything, waits for the drain and checks the
// completion records at L1 against its own publish history:
//
//	go run ./cmd/leafline-chaos --duration 90s --seed 1
//	go run ./cmd/leafline-chaos --duration 30m --seed 7 --edges 2
//	go run ./cmd/leafline-chaos --negative-control --duration 30s
//	go run ./cmd/leafline-chaos --duration 120s --edges 2 --transport relay --faults kill,linkcut,park,replace,rollback
//
// The faults replace and rollback need the relay on every link: a link by
// nats-server's durable sourcing cannot follow an upstream stream that was
// created again or restored from an older copy, so --transport sourcing
// or mixed refuses them (and leaves them out of the default --faults).
//
// The last line of its output is
//
//	chaos seed=S duration=D events=N faults=K lost=0 duplicate_completions=0 phantoms=0 max_drain_s=X
//
// Exit codes: 0 nothing lost, applied twice or invented, and every fault
// behaved; 1 a history violation (lost, duplicate_completions or phantoms
// above zero, a completion that regressed, or an event an edge reported
// expired and also with another status); 2 usage; 3 no history
// violation, but a fault's own check failed (a box crashed outside a fault,
// a full disk was not reported or not recovered from, a corrupt outbox was
// accepted, parks that made the hub release nothing, a backup or restore
// of a stopped box that failed); 4 the driver could not run the system.
// See README.md.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/leafline/leafline/cmd/leafline-chaos/internal/receiver"
)

// Exit codes.
const (
	exitOK        = 0
	exitViolation = 1
	exitUsage     = 2
	exitFaultChk  = 3
	exitHarness   = 4
)

// Fault kinds selectable with --faults.
const (
	faultKill      = "kill"
	faultFailpoint = "failpoint"
	faultLinkCut   = "linkcut"
	faultPause     = "pause"
	faultDisk      = "disk"
	faultCorrupt   = "corrupt"
	faultNetns     = "netns"
	faultPowerCut  = "powercut"
	faultPark      = "park"     // an edge stopped past its backlog budget at the hub
	faultReplace   = "replace"  // a box's data dir wiped (a blank disk, same site)
	faultRollback  = "rollback" // a box's data dir restored from an earlier backup
)

var allFaults = []string{faultKill, faultFailpoint, faultLinkCut, faultPause, faultDisk, faultCorrupt, faultNetns, faultPowerCut,
	faultPark, faultReplace, faultRollback}

// relayOnlyFaults need the relay on every link: nats-server 2.15.3's
// durable sourcing cannot follow an upstream stream that was created again
// or rolled back (its flow-control replies acknowledge messages it
// ignored), so a sourcing link skips what the new stream stores.
var relayOnlyFaults = []string{faultReplace, faultRollback}

// negativeControlEnv makes every edge ACK each message as soon as it is
// fetched and die, now and then, before anything is durable. The point
// is hit once per batch, tens of times in a short run: at 0.25 a run
// without a single kill (which would show no loss) is about one in
// several thousand; at 0.05 it was about one in eight.
const negativeControlEnv = "edge.ack_early=on,edge.after_sink_write=kill@0.25"

// fileNoDirSyncEnv makes the file sink skip its directory fsync.
const fileNoDirSyncEnv = "sink.file.skip_dir_sync=on"

// options are the driver's settings; the zero value of each field means the
// flag's default (see defaultOptions).
type options struct {
	Duration        time.Duration // fault phase
	Seed            uint64
	Rate            int // events per second published at L1
	Edges           int // 1 or 2
	Faults          map[string]bool
	NegativeControl bool
	Sink            string // edge1's sink: "store" or "http" (a receiver process)
	Cleanup         bool   // L1 runs completion.cleanup; the checker audits it
	Transport       string // hop transport: "", relay, sourcing or mixed (see transportOf)
	// Priority gives the topology the class urgent: the events on
	// events.chaos.0, one in eight, by their own links and streams.
	Priority bool
	// UnsafeSync runs the boxes on forgetfs with jetstream.sync_interval
	// at nats-server's 2-minute default: the powercut fault's negative
	// control.
	UnsafeSync bool
	// PowerCutPOSIX makes a name durable only once its own directory is
	// fsynced (POSIX to the letter) instead of with any fsync (ext4).
	PowerCutPOSIX bool
	// FileNoDirSync runs every edge with the file sink and the failpoint
	// sink.file.skip_dir_sync under PowerCutPOSIX: the file sink's
	// negative control for power cuts.
	FileNoDirSync bool

	FaultEvery    time.Duration // mean interval between two faults
	LongCut       time.Duration // length of the long link cuts (> the 2m duplicate window)
	LongCutEvery  time.Duration // one long cut per this much fault time; 0: none
	DiskEvery     time.Duration
	CorruptEvery  time.Duration
	ParkFor       time.Duration // how long the park fault keeps an edge stopped
	ParkEvery     time.Duration // one park per this much fault time
	AckWait       time.Duration // the edges' delivery.ack_wait
	DiskSize      int64         // tmpfs size for the disk fault; 0: sized from duration and rate
	DrainTimeout  time.Duration
	DrainStall    time.Duration // stop waiting when nothing completes for this long
	RedriveAfter  time.Duration // L1's completion.redrive_after (the origin duplicate window is a third of it)
	Dir           string        // keep everything under Dir (default: a temp dir)
	Keep          bool          // keep the temp dir even on success
	Bin           string        // a prebuilt leafline binary (default: go build)
	Verbose       bool
	Stdout        io.Writer // the report
	Stderr        io.Writer // progress and fault log
	progressEvery time.Duration
}

// defaultOptions are the flags' defaults, and what a zero field of
// options means (LongCutEvery excepted: zero is no long cut).
var defaultOptions = options{
	Duration: 90 * time.Second, Rate: 200, Edges: 2, Sink: "store",
	FaultEvery: 4 * time.Second, LongCut: 150 * time.Second, LongCutEvery: 5 * time.Minute,
	DiskEvery: 4 * time.Minute, CorruptEvery: 3 * time.Minute, AckWait: 5 * time.Second,
	ParkFor: 60 * time.Second, ParkEvery: 4 * time.Minute,
	DrainTimeout: 3 * time.Minute, DrainStall: 60 * time.Second, RedriveAfter: 45 * time.Second,
	progressEvery: 10 * time.Second,
}

func (o *options) defaults() {
	d := defaultOptions
	o.Duration, o.Rate, o.Edges, o.Sink = cmp.Or(o.Duration, d.Duration), cmp.Or(o.Rate, d.Rate), cmp.Or(o.Edges, d.Edges), cmp.Or(o.Sink, d.Sink)
	o.FaultEvery, o.LongCut = cmp.Or(o.FaultEvery, d.FaultEvery), cmp.Or(o.LongCut, d.LongCut)
	o.DiskEvery, o.CorruptEvery, o.AckWait = cmp.Or(o.DiskEvery, d.DiskEvery), cmp.Or(o.CorruptEvery, d.CorruptEvery), cmp.Or(o.AckWait, d.AckWait)
	o.ParkFor, o.ParkEvery = cmp.Or(o.ParkFor, d.ParkFor), cmp.Or(o.ParkEvery, d.ParkEvery)
	o.DrainTimeout, o.DrainStall = cmp.Or(o.DrainTimeout, d.DrainTimeout), cmp.Or(o.DrainStall, d.DrainStall)
	o.RedriveAfter, o.progressEvery = cmp.Or(o.RedriveAfter, d.RedriveAfter), cmp.Or(o.progressEvery, d.progressEvery)
	if o.Faults == nil {
		o.Faults = map[string]bool{}
	}
	o.Stdout, o.Stderr = cmp.Or[io.Writer](o.Stdout, io.Discard), cmp.Or[io.Writer](o.Stderr, io.Discard)
}

func (o *options) validate() error {
	var errs []error
	if o.Duration < 5*time.Second || o.Duration > 24*time.Hour {
		errs = append(errs, errors.New("--duration must be 5s..24h"))
	}
	if o.Rate < 1 || o.Rate > 2000 {
		errs = append(errs, errors.New("--rate must be 1..2000 events/s"))
	}
	switch o.Transport {
	case "", "relay", "sourcing", "mixed":
	default:
		errs = append(errs, fmt.Errorf("--transport %q: must be relay, sourcing or mixed", o.Transport))
	}
	if o.Priority && (o.Transport == "sourcing" || o.Transport == "mixed") {
		errs = append(errs, fmt.Errorf("--priority needs the relay on the edges' links, not --transport %s", o.Transport))
	}
	if hasSourcing(o.Transport) {
		for _, f := range relayOnlyFaults {
			if o.Faults[f] {
				errs = append(errs, fmt.Errorf("--faults %s needs --transport relay, not %s: only relay links survive a box replaced or rolled back "+
					"(nats-server 2.15.3's durable sourcing acknowledges, in its flow-control replies, messages it ignored, so a sourcing link "+
					"skips what a wiped or restored upstream stream stores again)", f, o.Transport))
			}
		}
	}
	if o.Faults[faultPark] && (o.ParkFor < 10*time.Second || o.ParkEvery < o.ParkFor) {
		errs = append(errs, errors.New("--park must be at least 10s, and --park-every at least --park"))
	}
	if o.Edges < 1 || o.Edges > 2 {
		errs = append(errs, errors.New("--edges must be 1 or 2"))
	}
	if o.FaultEvery < 100*time.Millisecond {
		errs = append(errs, errors.New("--fault-every must be at least 100ms"))
	}
	if o.AckWait < time.Second {
		errs = append(errs, errors.New("--ack-wait must be at least 1s"))
	}
	if o.Sink != "store" && o.Sink != "http" {
		errs = append(errs, fmt.Errorf("--sink must be store or http, got %q", o.Sink))
	}
	if o.UnsafeSync && o.NegativeControl {
		errs = append(errs, errors.New("--unsafe-sync and --negative-control are two different controls; run them apart"))
	}
	if o.UnsafeSync && !o.Faults[faultPowerCut] {
		errs = append(errs, errors.New("--unsafe-sync needs the powercut fault"))
	}
	if o.FileNoDirSync && (o.NegativeControl || o.UnsafeSync) {
		errs = append(errs, errors.New("--file-no-dir-sync is a control of its own; run it apart from --negative-control and --unsafe-sync"))
	}
	if o.FileNoDirSync && !o.Faults[faultPowerCut] {
		errs = append(errs, errors.New("--file-no-dir-sync needs the powercut fault"))
	}
	if o.FileNoDirSync && o.Sink == "http" {
		errs = append(errs, errors.New("--file-no-dir-sync runs every edge with the file sink; it does not combine with --sink http"))
	}
	if o.Sink == "http" && o.NegativeControl {
		errs = append(errs, errors.New("--sink http does not combine with --negative-control (which needs the file sink)"))
	}
	if o.RedriveAfter < 3*time.Second {
		errs = append(errs, errors.New("--redrive-after must be at least 3s"))
	}
	for f := range o.Faults {
		if !slices.Contains(allFaults, f) {
			errs = append(errs, fmt.Errorf("--faults: unknown fault %q (known: %s)", f, strings.Join(allFaults, ",")))
		}
	}
	return errors.Join(errs...)
}

// hasSourcing reports whether --transport puts a link on nats-server's
// durable sourcing.
func hasSourcing(transport string) bool { return transport == "sourcing" || transport == "mixed" }

// defaultFaults is --faults when the flag is not given: none for the
// negative control, powercut for its controls, every fault but the
// relay-only ones with a sourcing link, else every fault.
func defaultFaults(o options) string {
	switch {
	case o.NegativeControl:
		return "none"
	case o.UnsafeSync || o.FileNoDirSync:
		return faultPowerCut
	case hasSourcing(o.Transport):
		return strings.Join(slices.DeleteFunc(slices.Clone(allFaults), func(f string) bool { return slices.Contains(relayOnlyFaults, f) }), ",")
	}
	return strings.Join(allFaults, ",")
}

func parseFaults(s string) map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && f != "none" {
			if f == "all" {
				for _, a := range allFaults {
					m[a] = true
				}
				continue
			}
			m[f] = true
		}
	}
	return m
}

func faultList(m map[string]bool) string {
	var out []string
	for f, on := range m {
		if on {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == forwardCommand {
		os.Exit(runForward(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == receiver.Command {
		os.Exit(receiver.Run(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var faults string
	d := defaultOptions
	fs.DurationVar(&o.Duration, "duration", d.Duration, "how long to inject faults (the drain comes after)")
	fs.Uint64Var(&o.Seed, "seed", 0, "random seed for the fault schedule (0: from the clock, printed)")
	fs.IntVar(&o.Rate, "rate", d.Rate, "events per second published at L1")
	fs.IntVar(&o.Edges, "edges", d.Edges, "number of edge boxes (1 or 2); edge2 uses the file sink")
	fs.StringVar(&o.Sink, "sink", d.Sink, "edge1's sink: store, or http (a receiver process that the kill fault kills too, checked to hold every event L1 records)")
	fs.StringVar(&o.Transport, "transport", "", "hop transport of the links: relay, sourcing, or mixed (hub↔L1 and edge2 relay, edge1 sourcing); empty: the topology default")
	fs.BoolVar(&o.Priority, "priority", false, "give the topology the priority class urgent (events.chaos.0, one event in eight); needs the relay")
	fs.StringVar(&faults, "faults", strings.Join(allFaults, ","), "comma-separated faults: "+strings.Join(allFaults, ",")+", all or none (the default leaves out "+strings.Join(relayOnlyFaults, " and ")+" with --transport sourcing or mixed)")
	fs.BoolVar(&o.NegativeControl, "negative-control", false, "run the edges with LEAFLINE_FAILPOINTS="+negativeControlEnv+" (ACK before anything is durable): the checker must report loss; --faults defaults to none")
	fs.BoolVar(&o.UnsafeSync, "unsafe-sync", false, "run the boxes on forgetfs with jetstream.sync_interval 2m (nats-server's default) instead of always, and L1's redrive off: the powercut fault's negative control, which must report loss; --faults defaults to powercut")
	fs.BoolVar(&o.PowerCutPOSIX, "powercut-posix", false, "model the power cut by POSIX to the letter: a new, renamed or removed name is durable only once its own directory is fsynced (default: as ext4 and XFS, once anything is fsynced)")
	fs.BoolVar(&o.FileNoDirSync, "file-no-dir-sync", false, "run every edge with the file sink and LEAFLINE_FAILPOINTS="+fileNoDirSyncEnv+" (no directory fsync after a batch), under --powercut-posix: the file sink's negative control, which must report events processed whose file is gone; --faults defaults to powercut")
	fs.DurationVar(&o.FaultEvery, "fault-every", d.FaultEvery, "mean interval between two faults")
	fs.DurationVar(&o.LongCut, "long-cut", d.LongCut, "length of the long link cuts (longer than the 2m duplicate window)")
	fs.DurationVar(&o.LongCutEvery, "long-cut-every", d.LongCutEvery, "one long link cut per this much fault time (0: none; none in runs shorter than --long-cut + 1m)")
	fs.DurationVar(&o.DiskEvery, "disk-every", d.DiskEvery, "one full-disk fault per this much fault time")
	fs.DurationVar(&o.CorruptEvery, "corrupt-every", d.CorruptEvery, "one corrupt-outbox fault per this much fault time")
	fs.DurationVar(&o.ParkFor, "park", d.ParkFor, "how long the park fault keeps an edge stopped (the edges' backlog budget at the hub is sized from it and --rate so that a park passes it)")
	fs.DurationVar(&o.ParkEvery, "park-every", d.ParkEvery, "one park per this much fault time (none in runs shorter than --park + 10s)")
	fs.DurationVar(&o.AckWait, "ack-wait", d.AckWait, "the edges' delivery.ack_wait (pauses last 1.2x to 3x this)")
	var diskMiB int64
	fs.Int64Var(&diskMiB, "disk-mib", 0, "size of edge1's tmpfs data dir for the disk fault, MiB (0: sized from --duration and --rate, at least 64)")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", d.DrainTimeout, "how long to wait, after healing, for every event to complete")
	fs.DurationVar(&o.DrainStall, "drain-stall", d.DrainStall, "stop waiting for the drain when nothing completed for this long")
	fs.DurationVar(&o.RedriveAfter, "redrive-after", d.RedriveAfter, "L1's completion.redrive_after: how soon L1 publishes again an event a hop lost (the origin duplicate window and overdue_after are set to a third of it)")
	fs.StringVar(&o.Dir, "dir", "", "keep configs, data, logs and the history under `DIR` (default: a temp dir, removed on success)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temp dir even on success")
	fs.BoolVar(&o.Cleanup, "cleanup", false, "run L1 with completion.cleanup on, and check that every message gone from L1A has an audit record of a done event")
	fs.StringVar(&o.Bin, "bin", "", "use this leafline binary instead of building ./cmd/leafline")
	fs.BoolVar(&o.Verbose, "v", false, "log every fault as it happens")
	recheckDir := fs.String("recheck", "", "check a kept run `DIR` again (its driver died before reporting): starts its L1 alone and prints the report")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "chaos: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	faultsSet := false
	fs.Visit(func(f *flag.Flag) { faultsSet = faultsSet || f.Name == "faults" })
	if !faultsSet {
		faults = defaultFaults(o)
	}
	if o.FileNoDirSync {
		o.PowerCutPOSIX = true // ext4's journal would commit the names with the outbox's fsync
	}
	o.Faults = parseFaults(faults)
	o.DiskSize = diskMiB << 20
	o.Stdout, o.Stderr = stdout, stderr
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	o.defaults()
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return exitUsage
	}
	run := run
	if *recheckDir != "" {
		run = func(ctx context.Context, o options) (*result, error) { return recheck(ctx, o, *recheckDir) }
	}
	res, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		if res == nil {
			return exitHarness
		}
	}
	return res.exitCode(err)
}
