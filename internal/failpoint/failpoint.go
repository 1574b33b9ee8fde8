// Package failpoint lets fault-injection runs kill a box at named points of
// the commit/ACK protocol. It is off unless the LEAFLINE_FAILPOINTS
// environment variable is set, so production runs pay one boolean check per
// point and nothing else.
//
//	LEAFLINE_FAILPOINTS="edge.after_outbox_commit=kill@0.01,edge.ack_early=on"
//
// Each entry is NAME=ACTION, with ACTION "kill@P" (kill the process with
// probability P at each hit, 0 < P <= 1) or "on" (Enabled(NAME) is true).
// A kill is os.Process.Kill of the process itself: SIGKILL on Unix,
// TerminateProcess (exit code 1) on Windows; neither runs deferred code or
// flushes anything, as a power cut would not.
// A malformed value makes the process exit at start with a message naming
// the entry: a fault run must never silently run without its faults.
package failpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// EnvVar is the environment variable that enables failpoints.
const EnvVar = "LEAFLINE_FAILPOINTS"

// The named points of the protocol.
const (
	EdgeAfterSinkWrite    = "edge.after_sink_write"    // after the sink write, before the outbox commit
	EdgeAfterOutboxCommit = "edge.after_outbox_commit" // after the outbox commit, before the receipt publish
	EdgeBeforePubAck      = "edge.before_puback"       // receipt publish returned, before its PubAck is handled
	EdgeAfterPubAck       = "edge.after_puback"        // PubAck handled, before the outbox record is marked
	EdgeAfterMark         = "edge.after_mark"          // marked published, before the ACK
	L1AfterKVWrite        = "l1.after_kv_write"        // completion written to KV, before the ACK
	L1AfterAuditWrite     = "l1.after_audit_write"     // a cleanup pass's audit records PubAck'ed, before its deletes
	// EdgeAckEarly is the negative control: the runner ACKs each message
	// as soon as it is fetched, before anything is durable. A checker must
	// then see loss.
	EdgeAckEarly = "edge.ack_early"
	// SinkFileSkipDirSync is the file sink's negative control for power
	// cuts: the sink does not fsync its directory after a batch, so the
	// names of the files it wrote are not durable when the runner ACKs.
	SinkFileSkipDirSync = "sink.file.skip_dir_sync"
)

var points map[string]float64 // name → kill probability; -1 means "on"

func init() {
	v := os.Getenv(EnvVar)
	if v == "" {
		return
	}
	p, err := Parse(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", EnvVar, err)
		os.Exit(2)
	}
	points = p
}

// Parse parses a LEAFLINE_FAILPOINTS value.
func Parse(v string) (map[string]float64, error) {
	known := map[string]bool{EdgeAfterSinkWrite: true, EdgeAfterOutboxCommit: true, EdgeBeforePubAck: true,
		EdgeAfterPubAck: true, EdgeAfterMark: true, L1AfterKVWrite: true, L1AfterAuditWrite: true, EdgeAckEarly: true,
		SinkFileSkipDirSync: true}
	out := map[string]float64{}
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name, action, ok := strings.Cut(e, "=")
		if !ok || !known[name] {
			return nil, fmt.Errorf("entry %q: want NAME=kill@P or NAME=on with a known NAME", e)
		}
		switch {
		case action == "on":
			out[name] = -1
		case strings.HasPrefix(action, "kill@"):
			p, err := strconv.ParseFloat(strings.TrimPrefix(action, "kill@"), 64)
			if err != nil || !(p > 0 && p <= 1) {
				return nil, fmt.Errorf("entry %q: kill probability must be in (0, 1]", e)
			}
			out[name] = p
		default:
			return nil, fmt.Errorf("entry %q: action must be kill@P or on", e)
		}
	}
	return out, nil
}

// Inject kills the process, with the configured probability, if the named
// point is armed with kill@P. It does nothing otherwise. The line it writes
// to stderr first says "SIGKILL" on every platform: fault-injection drivers
// look for it.
func Inject(name string) {
	if points == nil {
		return
	}
	if p, ok := points[name]; ok && p > 0 && rand.Float64() < p {
		fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL\n", name)
		if self, err := os.FindProcess(os.Getpid()); err == nil {
			_ = self.Kill()
		}
		os.Exit(137) // not reached unless the kill failed; never continue past the point
	}
}

// Enabled reports whether the named point is armed with "on".
func Enabled(name string) bool {
	if points == nil {
		return false
	}
	return points[name] < 0
}
