package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/leafline/leafline/topology"
)

// Estimate is how long the phases of o take, from their sizes: a cost per
// phase of a fixed part (servers started, links up) and a part per event,
// per cut or per edge. The costs were measured on a 2-core machine with a
// local SSD under SyncAlways; a faster disk or more cores take less, a
// busy machine more. It is an estimate, for the line Leafline prints
// before the first phase and for choosing sizes, not a figure.
func (o Options) Estimate() time.Duration {
	o.setDefaults()
	s := o.estimateAlone()
	for _, t := range o.Transports {
		s += o.estimateLinked(t == topology.TransportRelay)
	}
	s += o.estimateFieldLinks()
	if o.on("memory") {
		// Four systems started; two full runs and a tenth at about
		// 3,000 events a second end to end, and 1.1 GiB parked.
		s += 4*6 + per(2*o.Memory+o.Memory/10, 0.35) + 300
	}
	if o.on("origin") {
		// One system started; the events at about 3,000 a second.
		s += 6 + per(o.Origin, 0.35)
	}
	if o.on("r") {
		s += 2 + o.RSSAge.Seconds() + per(o.RSS, 0.07)
	}
	return time.Duration(s * float64(time.Second))
}

// per is the seconds of n events at perK seconds a thousand.
func per(n int, perK float64) float64 { return float64(n) / 1000 * perK }

// estimateAlone is the seconds of the phases on one box: k, z, l1 and the
// runner's.
func (o Options) estimateAlone() float64 {
	var s float64
	if o.on("k") {
		s += 1 + per(min(o.Backlog, 20_000), 0.05)
	}
	if o.on("z") {
		s += 5
	}
	if o.on("l1") {
		// The KV store's 10k events, then the applies and the rebuild.
		s += 45 + per(o.L1Events, 0.15) + per(o.L1Tracked, 0.1)
	}
	if o.anyOn("s", "a", "b", "c", "d") {
		s += 5 + per(o.Backlog, 0.04) // started, preloaded at sync 2m, restarted
		if o.on("s") {
			s += per(o.Probe, 0.8)
		}
		if o.on("a") {
			s += per(o.Backlog, 0.02)
		}
		if o.on("b") {
			s += per(o.Backlog, 0.05) + per(min(o.Backlog, 20_000), 0.15)
		}
		if o.on("c") {
			s += per(o.Naive, 1.4)
		}
		if o.on("d") {
			s += per(o.Backlog, 0.07) + per(o.File, 0.45)
		}
	}
	return s
}

// estimateLinked is the seconds of the phases that run on each transport
// (relay or sourcing): f, e, l and F.
func (o Options) estimateLinked(relay bool) float64 {
	var s float64
	if o.anyOn("f", "e") {
		s += 8
	}
	if o.on("f") {
		drain := 0.31
		if relay {
			drain = 0.05
		}
		s += 3 + per(o.Drain, 0.25+drain)
	}
	if o.on("e") {
		e2e := 0.6
		if relay {
			e2e = 0.2
		}
		s += per(o.E2E, e2e)
	}
	if o.on("l") {
		s += 4 + float64(o.Cuts)*(o.CutFor.Seconds()+0.3)
	}
	if o.on("F") {
		// Started and linked, published to the hub during the cut
		// (which lasts longer when the publish does), then drained.
		events := o.FleetEdges * o.FleetEvents
		drain := 0.85
		if relay {
			drain = 0.15
		}
		cut := max(o.FleetCut.Seconds(), per(events, 0.4))
		s += 5 + 0.1*float64(o.FleetEdges) + cut + per(events, drain)
		if o.FleetEdges >= 2 {
			// The same again with one edge parked: the others drain;
			// then it catches up, and the first drain once more.
			s += 1 + cut + per(events-o.FleetEvents, drain)
			s += per(o.FleetEvents, drain) + cut + per(events, drain)
		}
	}
	return s
}

// estimateFieldLinks is the seconds of the field-link phases: wire, cap,
// expiry and priority; then park and replace.
func (o Options) estimateFieldLinks() float64 {
	var s float64
	if o.on("wire") {
		s += 3 * (1.5 + per(o.Wire, 0.25))
	}
	if o.on("cap") {
		// Started, the backlogs built behind a cut, every box
		// restarted with the cap, then the warm-up and the window.
		up, down := capBacklogs(o.CapWindow, o.Size)
		s += 10 + per(up, 0.3) + per(down, 0.15) + (capWarm + o.CapWindow).Seconds()
	}
	if o.on("expiry") {
		s += 4.5 + per(o.Expiry, 1.5)
	}
	if o.on("priority") {
		// Two systems, each with its backlog published and drained
		// (and the urgent events a second apart), the first with a
		// fifth of it again for the share.
		s += 2*(6+max(per(o.PriorityBacklog, 0.15), float64(o.Urgent))) + 3 + per(o.PriorityBacklog/5, 0.2)
	}
	if o.on("park") {
		// Two sets to edge1 and edge2's catch-up on the second, each
		// event's cost in proportion to its size.
		s += 6 + per(o.ParkEvents, 5.5*max(0.25, float64(o.ParkSize)/8192))
	}
	if o.on("replace") {
		// Six restarts (two per rollback) and every event of four cases.
		s += 3 + 6*1.5 + per(4*(o.ReplaceBefore+o.ReplaceAfter), 0.6)
	}
	if o.on("sites") {
		// Four boxes started, four reloads, the pending events.
		s += 8 + per(o.SitesPending, 0.6)
	}
	return s
}

// estimateLine is the line printed before the first phase.
func (o Options) estimateLine() string {
	o.setDefaults()
	n := 0
	for _, p := range Phases {
		if o.on(p) {
			n++
		}
	}
	phases := "phases"
	if n == 1 {
		phases = "phase"
	}
	d := o.Estimate()
	about := fmt.Sprintf("%d min", int(d.Minutes()+0.5))
	if d < 90*time.Second {
		about = fmt.Sprintf("%d s", int(d.Seconds()+0.5))
	}
	return fmt.Sprintf("bench: %d %s, transports %s, about %s at these sizes (an estimate)", n, phases, strings.Join(o.Transports, ","), about)
}
