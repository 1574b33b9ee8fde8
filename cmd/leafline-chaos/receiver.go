//go:build linux

package main

import (
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/check"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/faultlog"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/receiver"
)

// checkReceiver records a finding for every event that L1 records as
// processed by edge1 and the receiver does not hold: a receipt without the
// work behind it. It returns how many events it checked and how many the
// receiver lacks. The receiver keeps its files outside edge1's data dir,
// so a replace or a rollback of edge1 destroys none of them: every event
// edge1 reported must be there.
func checkReceiver(r *receiver.Receiver, obs *check.Observer, rec *faultlog.Log) (checked, missing int) {
	checked, missing, _ = checkHeld("the http target", "edge1", r.Holds, nil, obs, rec)
	return checked, missing
}

// checkFileSinks does the same for every edge whose sink is the file sink,
// against its directory: a file that a power cut took after the edge
// reported the event. The directory is inside the edge's data dir, so a
// replace or a rollback destroys files of events the edge had reported:
// those (box.sinkGone, listed by the fault before the wipe and after the
// restore) are counted apart, as gone, and not as missing. A file missing
// that no wipe took is still missing; an event whose file a wipe took and
// that the edge processed again has its file back and counts as held.
func checkFileSinks(c *system, obs *check.Observer, rec *faultlog.Log) (checked, missing, gone int) {
	for _, e := range c.edges() {
		if e.fileSinkDir == "" {
			continue
		}
		dir := e.fileSinkDir
		n, m, g := checkHeld(e.name+"'s file sink", e.name, func(id string) (bool, error) { return receiver.HoldsFile(dir, id) }, e.sinkGoneOf, obs, rec)
		checked, missing, gone = checked+n, missing+m, gone+g
	}
	return checked, missing, gone
}

// checkHeld records a finding for the events that L1 records as processed
// by processor and target does not hold, but those whose file wiped says
// a replace or a rollback destroyed (nil: none), which it counts as gone
// and leaves out of checked.
func checkHeld(target, processor string, holds func(id string) (bool, error), wiped func(id string) bool, obs *check.Observer, rec *faultlog.Log) (checked, missing, gone int) {
	var examples []string
	reported := obs.ReportedBy(processor)
	for _, n := range reported {
		ok, err := holds(check.EventID(n))
		if err != nil {
			rec.Finding("%s: %v", target, err)
			return len(reported), len(reported), 0
		}
		switch {
		case ok:
		case wiped != nil && wiped(check.EventID(n)):
			gone++
		default:
			missing++
			if len(examples) < 5 {
				examples = append(examples, check.EventID(n))
			}
		}
	}
	if missing > 0 {
		rec.Finding("%s: %d events recorded processed by %s at L1 are not held (e.g. %v)", target, missing, processor, examples)
	}
	return len(reported) - gone, missing, gone
}
