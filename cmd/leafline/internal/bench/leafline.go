package bench

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leafline/leafline/topology"
)

// Phases are the phases Leafline runs, in order; see the doc of Options.
var Phases = []string{"k", "z", "l1", "s", "a", "b", "c", "d", "f", "e", "l", "F", "wire", "cap", "expiry", "priority", "park", "replace", "sites", "memory", "origin", "r"}

// PhaseNames name the phases that Phases calls by a letter: a name says
// the same as its letter in Options.Phases (and `leafline bench --only`).
// The rows and figures keep the letters.
var PhaseNames = map[string]string{
	"signing": "k", "fsync": "z", "publish": "s", "consume": "a", "receipts": "b", "naive": "c",
	"runner": "d", "drain": "f", "e2e": "e", "restore": "l", "fleet": "F", "rss": "r",
}

// phaseName is the name of the phase of letter p, or p when it has none.
func phaseName(p string) string {
	for name, letter := range PhaseNames {
		if letter == p {
			return name
		}
	}
	return p
}

// Transports are the link transports SetTransport knows.
var Transports = []string{topology.TransportSourcing, topology.TransportRelay}

// SetTransport makes every link of t carry its events and receipts over
// transport, one of Transports: JetStream sourcing across the leafnode
// links, or leafline's relay (a batch per fsync).
func SetTransport(t *topology.Topology, transport string) error {
	if !slices.Contains(Transports, transport) {
		return fmt.Errorf("bench: unknown transport %q (known: %s)", transport, strings.Join(Transports, ", "))
	}
	t.Transport = transport
	for i := range t.Sites {
		t.Sites[i].Transport = ""
	}
	return nil
}

// Options shape Leafline. Zero sizes mean the defaults in parentheses:
// at those, each phase takes at most a few minutes on a 2-core machine
// (see Estimate); the figures a deployment is sized on take larger ones
// (E2E 50000, Drain 100000, Cuts 20, FleetCut 2m).
//
// Phases without servers, on a quiet process:
//
//	k  CPU cost of signing receipts (edge) and verifying them (L1);
//	z  the disk's fsync ceiling: 256-byte appends, each fsynced, by 1 and
//	   by 16 writers, each on a file of its own.
//
// Then L1 alone (an embedded server under SyncAlways with L1A and R1, and
// the completion service, no hub or edges):
//
//	l1 L1Events events, each with two expected processors, applied by
//	   the completion service in the order they reach L1 in service:
//	   their origins written to L1A and applied, then both their receipts
//	   written to R1 in atomic batches of 1000 messages and applied; once
//	   with one message per receipt (row l1one; its writes are the
//	   receipt ceiling of this run, row l1g) and once in bundles, as
//	   edges publish them (row l1); then 30k events on a state of 10k
//	   (l1s) and 30k on one of L1Tracked events, half of them pending
//	   (l1m), each the median of three samples taken in turn, and the
//	   summary's p99 over 100 calls.
//
// Then one system on loopback (l1, hub, two edges: edge1 store sink,
// edge2 file sink; mutual TLS links and signed receipts unless told
// otherwise), preloaded with sync_interval 2m (rows P1-P4, setup only),
// then restarted with SyncAlways and the edge links cut:
//
//	s  L1 publish and L1A→HA sourcing ingest (Probe events);
//	a  raw consume of edge1's backlog (durable pull consumer, Fetch+Ack);
//	b  receipt ceiling: atomic batch publish of receipts on edge1's server;
//	c  naive: per message Commit, synchronous receipt publish, Ack;
//	d  the real runner: store sink (edge1, Backlog), file sink (edge2, File).
//
// Then, per transport, a system of l1, a hub and one edge:
//
//	f  drain: the edge processes Drain events while its link is cut, then
//	   the link is restored and its receipts are timed until all are
//	   completed at L1;
//	e  end to end: E2E events published at L1 until completed at L1;
//	l  link restore: events published at L1 at Rate a second while the
//	   edge's link is cut Cuts times for CutFor each; per cut, the time
//	   from the restore until L1 records the completion of the first
//	   event published during the cut, and the "stalled on flow control"
//	   warnings the servers logged.
//
// Then, per transport, a fleet of one hub and FleetEdges edges, each with
// a filter of its own:
//
//	F  FleetEvents events per edge published at L1 while every edge link
//	   is cut for FleetCut; then every link is restored at once and the
//	   drain is timed until every event is completed at L1. With 2 edges
//	   or more, the same again on the same system with the last edge
//	   stopped (parked) for the whole run (row F_parked): its events stay
//	   at the hub, and the drain is timed until every other edge's events
//	   are completed; then, the parked edge back and caught up, the first
//	   drain once more (row F_again). A parked edge must not slow the
//	   others: fleet_parked_ratio is the mean of F and F_again over
//	   F_parked.
//
// Then, on the first transport, a system of l1, a hub and one edge per
// compression (off, s2_fast, s2_best on every link):
//
//	wire  Wire events published at L1 until L1 has applied every receipt;
//	      the bytes the edge link carried each way (counted by its proxy:
//	      TLS records and compressed frames as sent) per event down and per
//	      receipt up, ACKs, flow control and heartbeats included; beside
//	      them the message bytes of leafline_link_bytes_total, which do
//	      not see compression.
//
// Then a system of l1, a hub and one edge over the relay, the hub-edge
// link capped at 64,000 bytes a second (64KB/s) each way:
//
//	cap  a backlog each way (events at the hub, receipts at the edge)
//	     built behind a cut, the link restored under the cap; the message
//	     bytes it carries each way over CapWindow (leafline_link_bytes_total
//	     at the hub), and how far each is from the cap.
//
// Then, on the first transport, a system of l1, a hub and one edge whose
// events expire after 2s:
//
//	expiry  Expiry events published at L1 while the edge link is cut,
//	        the link restored once they are stale; each must end
//	        expired at L1 once, none processed at the edge, none
//	        pending; the drain from the restore is timed.
//
// Then two systems of l1, a hub and one edge over the relay, one with the
// priority class urgent (events.urgent.>) and one without classes:
//
//	priority  PriorityBacklog normal events at the hub behind a cut edge
//	          link; the link restored and Urgent events published at L1,
//	          one a second; each timed from its publish to its completion
//	          at L1 (urgent_p99_ms, and urgent_p99_ms_no_priority from the
//	          system without classes). With the class, a fifth of the
//	          backlog again, drained while urgent events flow at 10% of
//	          the rate: normal work's share of the completions meanwhile.
//
// Then a system of l1, a hub and two edges over the relay (store sinks),
// the hub box's jetstream.max_stream_bytes ParkStreamMiB MiB and the
// origin stream's duplicate window parkDuplicateWindow:
//
//	park  ParkEvents events of ParkSize bytes published at L1 with both
//	      edges up, timed until edge1 has completed each at L1; then
//	      edge2 stopped and as many again, timed the same (at the
//	      defaults 2.5 times the hub's stream limit: the hub releases
//	      edge2's oldest events past its backlog budget rather than
//	      fill); then edge2 started again, timed from its ready until it
//	      has completed each event of the second set (L1 sends it what
//	      the hub released). Every event must end complete for both
//	      edges, each receipt applied once.
//
// Then a system of l1, a hub and two edges over the relay, L1's redrive
// shortened (replaceRedriveAfter):
//
//	replace  four cases in turn: edge1 replaced (its data dir wiped), the
//	         hub replaced, edge1 rolled back (its data dir restored from a
//	         copy taken before ReplaceBefore events), the hub rolled back.
//	         In each, ReplaceBefore events complete at L1 before the
//	         change; once the box is ready again, ReplaceAfter events are
//	         published and timed from its ready until each is complete at
//	         L1 for both edges. Every event must end complete, each
//	         receipt applied once.
//
// Then a system of l1, a hub and two edges over the relay, started
// without edge2 in the topology:
//
//	sites  edge2 added: L1 and the hub reload the topology that has it,
//	       edge2 starts, and the time from its ready until L1 records
//	       its first completion is taken, events published at Rate a
//	       second; then edge2 stopped, SitesPending events published,
//	       and edge2 retired: L1 and the hub reload, and the time until
//	       L1 has closed each of those events is taken. The hub's link
//	       to edge1 must stay up, and the hub keep no consumer of edge2.
//
// Then four systems of l1, a hub and two edges (store sinks, relay
// links), each box a `leafline run` process of RSSBin, as configs/ lays
// them out; in each, events of MemorySize bytes are published at L1 and
// every process's anonymous and file-backed memory sampled from /proc
// every 500 ms:
//
//	memory  Memory events until each is complete at L1, each box under
//	        its role's default memory limit (mem) and under none
//	        (mem_nolimit); a tenth as many under the limits (mem_small);
//	        1.1 GiB of 8 KiB events with edge2 parked, never started,
//	        until edge1 has completed each (mem_parked), the hub's edge
//	        backlog budget 1 GiB. Each box's peaks, its Go heap after a GC at the
//	        end and its limit; the rates with and without the limits.
//
//	origin  Origin events of 1 KiB (five times the cap by default)
//	        published as fast as the publisher goes with L1's
//	        jetstream.max_stream_bytes OriginStreamMiB and every other
//	        setting its default, until each is complete at L1: events
//	        refused, lost, the most L1A held against its cap, the
//	        cleanup's deletes against its audit records.
//
// And last:
//
//	r  peak RSS of an edge run as a separate `leafline run` process
//	   (SyncAlways) draining RSS events.
type Options struct {
	// Phases to run, from Phases; empty runs all.
	Phases []string
	// Transports run f and e once each; empty means "sourcing".
	Transports []string

	Backlog int // events preloaded for edge1, phases a-d (200000)
	Size    int // event payload bytes (256)
	File    int // events for the file sink run, at most Backlog (20000)
	Naive   int // events for the naive loop c (5000)
	E2E     int // events for end to end e (10000)
	Drain   int // receipts accumulated during the cut for f (20000)
	Probe   int // events for the SyncAlways probe s (10000)
	RSS     int // backlog of the separate-process run r (100000)
	Wire    int // events per compression mode for wire (2000)
	Expiry  int // stale events for expiry (1000)
	// PriorityBacklog and Urgent shape priority: the normal events at the
	// hub (100000) and the urgent events timed (20).
	PriorityBacklog, Urgent int

	// CapWindow is how long cap measures the capped link (60s).
	CapWindow time.Duration

	// L1Events and L1Tracked shape l1: the events applied (100000) and the
	// events tracked for the flat cost and the summary (1000000).
	L1Events, L1Tracked int

	// Cuts, CutFor and Rate shape l: how many cuts (20), how long each
	// lasts (2s), and the events published a second meanwhile (100).
	Cuts   int
	CutFor time.Duration
	Rate   int
	// FleetEdges, FleetEvents and FleetCut shape F: the edges (50), the
	// events routed to each (2000), and how long every link stays cut
	// (30s; the publish to the hub counts in it).
	FleetEdges, FleetEvents int
	FleetCut                time.Duration
	// ParkEvents, ParkSize and ParkStreamMiB shape park: the events
	// published in each of its two sets (20000), their payload bytes
	// (8192), and the hub box's jetstream.max_stream_bytes in MiB (64),
	// of which each edge's backlog budget is 3/4.
	ParkEvents, ParkSize, ParkStreamMiB int
	// ReplaceBefore and ReplaceAfter shape replace: the events published
	// before each change (1000) and after the box is ready again (1000).
	ReplaceBefore, ReplaceAfter int
	// SitesPending shapes sites: the events pending for the edge it
	// retires (500).
	SitesPending int
	// Memory and MemorySize shape memory: the events of its full runs
	// (1000000) and their payload bytes (256).
	Memory, MemorySize int
	// Origin and OriginStreamMiB shape origin: the events (327680: five
	// times the cap) and L1's jetstream.max_stream_bytes in MiB (64).
	Origin, OriginStreamMiB int

	// Compression is the leafnode compression of every link (a
	// topology.CompressionModes name) in every phase but wire, which
	// compares modes; empty keeps the topology default (s2_fast).
	Compression string

	// Batch and BacklogBatch set delivery.batch_size and
	// delivery.backlog_batch_size for every edge; zero keeps the defaults.
	Batch, BacklogBatch int
	// IDs is "random" (the default: every receipt and stored event lands on
	// its own B+tree page) or "time" (UUIDv7-like, 10 per millisecond).
	IDs string
	// Unsigned leaves receipts unsigned; Insecure runs the links over plain
	// TCP. The default is signed receipts and mutual TLS.
	Unsigned, Insecure bool
	// Profile, if set, is a directory for a CPU and a heap profile per phase.
	Profile string
	// RSSBin is the leafline binary r runs (it must accept run --config);
	// required for r.
	RSSBin string
	// RSSProfile, if set, receives the edge process's heap profile taken
	// when its Go heap peaked during r.
	RSSProfile string
	// RSSMemLimit is GOMEMLIMIT for r's edge process ("" keeps its default).
	RSSMemLimit string
	// RSSAge is how long r waits after its preload before it starts the
	// edge process.
	RSSAge time.Duration
	// Dir holds the systems' data; empty means a temp dir, removed after.
	Dir string
	// Out receives the banner (with the run's estimated wall time, see
	// Estimate), the table and the final line.
	Out io.Writer
	// Progress, if set, receives a line per phase redrawn in place (count,
	// rate, time left; see meter): give it a terminal, never a file or a
	// pipe. Nil draws no progress.
	Progress io.Writer
}

func (o *Options) setDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&o.Backlog, 200_000)
	def(&o.Size, 256)
	def(&o.File, 20_000)
	def(&o.Naive, 5_000)
	def(&o.E2E, 10_000)
	def(&o.Drain, 20_000)
	def(&o.Probe, 10_000)
	def(&o.RSS, 100_000)
	def(&o.Wire, 2000)
	def(&o.Expiry, 1000)
	def(&o.PriorityBacklog, 100_000)
	def(&o.Urgent, 20)
	def(&o.L1Events, 100_000)
	def(&o.L1Tracked, 1_000_000)
	def(&o.Cuts, 20)
	def(&o.Rate, 100)
	def(&o.FleetEdges, 50)
	def(&o.FleetEvents, 2000)
	def(&o.ParkEvents, 20_000)
	def(&o.ParkSize, 8192)
	def(&o.ParkStreamMiB, 64)
	def(&o.ReplaceBefore, 1000)
	def(&o.ReplaceAfter, 1000)
	def(&o.SitesPending, 500)
	def(&o.Memory, 1_000_000)
	def(&o.MemorySize, 256)
	def(&o.OriginStreamMiB, 64)
	def(&o.Origin, 5*o.OriginStreamMiB<<20/originSize)
	if o.CutFor == 0 {
		o.CutFor = 2 * time.Second
	}
	if o.FleetCut == 0 {
		o.FleetCut = 30 * time.Second
	}
	if o.CapWindow == 0 {
		o.CapWindow = time.Minute
	}
	o.File, o.Naive = min(o.File, o.Backlog), min(o.Naive, o.Backlog)
	if len(o.Phases) == 0 {
		o.Phases = Phases
	}
	phases := make([]string, len(o.Phases))
	for i, p := range o.Phases {
		phases[i] = cmp.Or(PhaseNames[p], p)
	}
	o.Phases = phases
	if len(o.Transports) == 0 {
		o.Transports = []string{"sourcing"}
	}
	if o.IDs == "" {
		o.IDs = "random"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// Validate reports every bad option at once.
func (o *Options) Validate() error {
	var errs []string
	for _, p := range o.Phases {
		if !slices.Contains(Phases, p) {
			var known []string
			for _, q := range Phases {
				if n := phaseName(q); n != q {
					q += " (" + n + ")"
				}
				known = append(known, q)
			}
			errs = append(errs, fmt.Sprintf("unknown phase %q (known: %s)", p, strings.Join(known, ", ")))
		}
	}
	for _, t := range o.Transports {
		if !slices.Contains(Transports, t) {
			errs = append(errs, fmt.Sprintf("unknown transport %q (known: %s)", t, strings.Join(Transports, ",")))
		}
	}
	for _, s := range []struct {
		name string
		v    int
	}{{"backlog", o.Backlog}, {"size", o.Size}, {"file", o.File}, {"naive", o.Naive}, {"e2e", o.E2E},
		{"drain", o.Drain}, {"probe", o.Probe}, {"rss", o.RSS}, {"l1-events", o.L1Events}, {"l1-tracked", o.L1Tracked}, {"batch", o.Batch}, {"backlog-batch", o.BacklogBatch},
		{"cuts", o.Cuts}, {"restore-rate", o.Rate}, {"fleet-events", o.FleetEvents}, {"wire", o.Wire}, {"expiry", o.Expiry},
		{"priority-backlog", o.PriorityBacklog}, {"urgent", o.Urgent}, {"park-events", o.ParkEvents},
		{"replace-before", o.ReplaceBefore}, {"replace-after", o.ReplaceAfter}, {"sites-pending", o.SitesPending},
		{"memory", o.Memory}, {"origin", o.Origin}} {
		if s.v < 0 || s.v > 10_000_000 {
			errs = append(errs, fmt.Sprintf("%s must be 0..10000000, got %d", s.name, s.v))
		}
	}
	if o.FleetEdges < 0 || o.FleetEdges > 200 {
		errs = append(errs, fmt.Sprintf("fleet-edges must be 0..200, got %d", o.FleetEdges))
	}
	if o.Rate > 10_000 {
		errs = append(errs, fmt.Sprintf("restore-rate must be at most 10000 a second, got %d", o.Rate))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"cut-for", o.CutFor}, {"fleet-cut", o.FleetCut}, {"cap-window", o.CapWindow}} {
		if d.v < 0 || d.v > time.Hour {
			errs = append(errs, fmt.Sprintf("%s must be 0..1h, got %v", d.name, d.v))
		}
	}
	if o.CapWindow > 0 && o.CapWindow < time.Second {
		errs = append(errs, fmt.Sprintf("cap-window must be at least 1s, got %v", o.CapWindow))
	}
	if o.Size > 0 && o.Size < 16 {
		errs = append(errs, fmt.Sprintf("size must be at least 16 bytes, got %d", o.Size))
	}
	if o.ParkSize != 0 && (o.ParkSize < 16 || o.ParkSize > maxParkSize) {
		errs = append(errs, fmt.Sprintf("park-size must be 16..%d bytes, got %d", maxParkSize, o.ParkSize))
	}
	if o.ParkStreamMiB != 0 && (o.ParkStreamMiB < 16 || o.ParkStreamMiB > 65536) {
		errs = append(errs, fmt.Sprintf("park-stream-mib must be 16..65536, got %d", o.ParkStreamMiB))
	}
	if o.Compression != "" && !slices.Contains(topology.CompressionModes, o.Compression) {
		errs = append(errs, fmt.Sprintf("compression %q: want one of %s", o.Compression, strings.Join(topology.CompressionModes, ", ")))
	}
	if o.IDs != "" && o.IDs != "random" && o.IDs != "time" {
		errs = append(errs, fmt.Sprintf("ids %q: want random or time", o.IDs))
	}
	if o.MemorySize != 0 && (o.MemorySize < 16 || o.MemorySize > maxParkSize) {
		errs = append(errs, fmt.Sprintf("memory-size must be 16..%d bytes, got %d", maxParkSize, o.MemorySize))
	}
	if o.OriginStreamMiB != 0 && (o.OriginStreamMiB < 16 || o.OriginStreamMiB > 65536) {
		errs = append(errs, fmt.Sprintf("origin-stream-mib must be 16..65536, got %d", o.OriginStreamMiB))
	}
	for _, p := range []string{"r", "memory", "origin"} {
		if o.on(p) && o.RSSBin == "" {
			errs = append(errs, "phase "+p+" needs the leafline binary to run (RSSBin)")
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench: %s", strings.Join(errs, "; "))
	}
	return nil
}

// originSize is the payload bytes of origin's events.
const originSize = 1024

// maxParkSize bounds ParkSize: an event, its headers included, must stay
// under the servers' max_payload (1 MiB).
const maxParkSize = 256 << 10

func (o *Options) on(phase string) bool {
	return len(o.Phases) == 0 || slices.Contains(o.Phases, phase)
}

func (o *Options) anyOn(phases ...string) bool {
	for _, p := range phases {
		if o.on(p) {
			return true
		}
	}
	return false
}

// Figure is one named figure of the final line.
type Figure struct {
	Name  string
	Value float64
}

// Line is the final `bench …` line: each figure as name=value.
func Line(figs []Figure) string {
	var b strings.Builder
	b.WriteString("bench")
	for _, f := range figs {
		b.WriteString(" " + f.Name + "=" + strconv.FormatFloat(f.Value, 'f', digits(f.Value), 64))
	}
	return b.String()
}

// digits keeps a ratio's decimals and drops a rate's.
func digits(v float64) int {
	if v >= 100 || v == 0 {
		return 0
	}
	return 3
}

// ParseLine reads a line printed by Line back into its figures.
func ParseLine(line string) ([]Figure, error) {
	fields := strings.Fields(line)
	if len(fields) == 0 || fields[0] != "bench" {
		return nil, fmt.Errorf("bench: not a bench line: %q", line)
	}
	var figs []Figure
	for _, f := range fields[1:] {
		name, val, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("bench: field %q is not name=value", f)
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: field %q: %w", f, err)
		}
		figs = append(figs, Figure{name, v})
	}
	return figs, nil
}
