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
// receiver lacks.
func checkReceiver(r *receiver.Receiver, obs *check.Observer, rec *faultlog.Log) (checked, missing int) {
	return checkHeld("the http target", "edge1", r.Holds, obs, rec)
}

// checkFileSinks does the same for every edge whose sink is the file sink,
// against its directory: a file that a power cut took after the edge
// reported the event.
func checkFileSinks(c *system, obs *check.Observer, rec *faultlog.Log) (checked, missing int) {
	for _, e := range c.edges() {
		if e.fileSinkDir == "" {
			continue
		}
		dir := e.fileSinkDir
		n, m := checkHeld(e.name+"'s file sink", e.name, func(id string) (bool, error) { return receiver.HoldsFile(dir, id) }, obs, rec)
		checked, missing = checked+n, missing+m
	}
	return checked, missing
}

// checkHeld records a finding for the events that L1 records as processed
// by processor and target does not hold.
func checkHeld(target, processor string, holds func(id string) (bool, error), obs *check.Observer, rec *faultlog.Log) (checked, missing int) {
	var examples []string
	reported := obs.ReportedBy(processor)
	for _, n := range reported {
		ok, err := holds(check.EventID(n))
		if err != nil {
			rec.Finding("%s: %v", target, err)
			return len(reported), len(reported)
		}
		if !ok {
			missing++
			if len(examples) < 5 {
				examples = append(examples, check.EventID(n))
			}
		}
	}
	if missing > 0 {
		rec.Finding("%s: %d events recorded processed by %s at L1 are not held (e.g. %v)", target, missing, processor, examples)
	}
	return len(reported), missing
}
