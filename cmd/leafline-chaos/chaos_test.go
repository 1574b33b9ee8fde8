//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/cmd/leafline-chaos/internal/check"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/faultlog"
	"github.com/leafline/leafline/cmd/leafline-chaos/internal/receiver"
	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/forgetfs"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/receipt"
)

// TestMain lets the test binary serve as the netns forwarder, like the
// chaos binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == forwardCommand {
		os.Exit(runForward(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == receiver.Command {
		os.Exit(receiver.Run(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// runChaos runs the driver in-process and returns its result and report.
func runChaos(t *testing.T, o options) (*result, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs L1, hub and edges as processes for minutes; skipped with -short")
	}
	var out bytes.Buffer
	o.Stdout = &out
	o.Stderr = testWriter{t}
	o.Dir = t.TempDir()
	o.defaults()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Duration+o.DrainTimeout+3*time.Minute)
	defer cancel()
	res, err := run(ctx, o)
	t.Logf("report:\n%s", out.String())
	if res == nil {
		t.Fatalf("the driver could not run: %v", err)
	}
	if err != nil {
		t.Logf("run error: %v", err)
	}
	return res, out.String()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestChaos_NegativeControl runs the edge with the negative-control
// failpoints (ACK before anything is durable, then die): the checker must
// see the loss.
func TestChaos_NegativeControl(t *testing.T) {
	res, out := runChaos(t, options{
		Duration:        30 * time.Second,
		Seed:            2,
		Edges:           1,
		NegativeControl: true,
		Faults:          map[string]bool{},
		DrainTimeout:    60 * time.Second,
		DrainStall:      15 * time.Second,
	})
	if res.Lost == 0 {
		t.Fatalf("negative control: the checker saw no loss (%s)", res.FinalLine)
	}
	if res.exitCode(nil) == exitOK {
		t.Fatalf("negative control: exit code 0")
	}
	if !strings.Contains(out, "negative control: the checker saw the loss") {
		t.Fatalf("report does not say the loss was seen")
	}
}

// TestChaos_Short is the short positive run: kills of every box, kills at
// the named failpoints and link cuts, then the checker must pass. One edge
// keeps it short; "mixed" puts the hub's link on the relay and the edge's
// on sourcing, so that both transports take faults.
func TestChaos_Short(t *testing.T) {
	res, _ := runChaos(t, options{
		Duration:     55 * time.Second,
		Seed:         1,
		Edges:        1,
		Transport:    "mixed", // the hub's link by the relay, edge1's by sourcing
		Faults:       map[string]bool{faultKill: true, faultLinkCut: true, faultFailpoint: true},
		FaultEvery:   3 * time.Second,
		DrainTimeout: 90 * time.Second,
	})
	if res.violation() {
		t.Fatalf("checker failed: %s", res.FinalLine)
	}
	if len(res.Findings) > 0 {
		t.Fatalf("fault checks failed: %q", res.Findings)
	}
	if res.Kills < 5 || res.Cuts < 2 {
		t.Fatalf("too few faults to mean anything: %d kills, %d cuts", res.Kills, res.Cuts)
	}
	if !strings.HasPrefix(res.FinalLine, "chaos seed=1 duration=55s events=") || !strings.Contains(res.FinalLine, " lost=0 duplicate_completions=0 phantoms=0 max_drain_s=") {
		t.Fatalf("final line %q", res.FinalLine)
	}
}

// TestChaos_ShortHTTP is a short positive run with edge1 on the http sink:
// a receiver process behind it, killed with the boxes, must hold every
// event L1 records as processed. Its topology has the priority class
// urgent, so the class's links and streams take the faults too.
func TestChaos_ShortHTTP(t *testing.T) {
	res, out := runChaos(t, options{
		Duration:     35 * time.Second,
		Seed:         3,
		Edges:        1,
		Sink:         "http",
		Priority:     true,
		Faults:       map[string]bool{faultKill: true, faultLinkCut: true, faultFailpoint: true},
		FaultEvery:   3 * time.Second,
		DrainTimeout: 90 * time.Second,
	})
	if res.violation() {
		t.Fatalf("checker failed: %s", res.FinalLine)
	}
	if len(res.Findings) > 0 {
		t.Fatalf("fault checks failed: %q", res.Findings)
	}
	if res.Kills < 3 {
		t.Fatalf("too few kills to mean anything: %d", res.Kills)
	}
	if res.TargetChecked == 0 || res.TargetMissing != 0 || !strings.Contains(out, "http target: holds") {
		t.Fatalf("http target check: %d checked, %d missing", res.TargetChecked, res.TargetMissing)
	}
	if !strings.Contains(res.FinalLine, " lost=0 duplicate_completions=0 phantoms=0 ") {
		t.Fatalf("final line %q", res.FinalLine)
	}
}

// TestChaos_Lifecycle is the short run of the lifecycle faults, every
// link by the relay: an edge parked past its backlog budget (the hub must
// release its events, and L1 send them again), edges and the hub wiped
// (replace) and restored from an older backup (rollback). edge2's file
// sink loses files with its data dir, which the checker counts apart.
func TestChaos_Lifecycle(t *testing.T) {
	res, out := runChaos(t, options{
		Duration:     40 * time.Second,
		Seed:         6,
		Edges:        2,
		Transport:    "relay",
		Faults:       map[string]bool{faultPark: true, faultReplace: true, faultRollback: true},
		FaultEvery:   3 * time.Second,
		ParkFor:      15 * time.Second,
		RedriveAfter: 24 * time.Second,
		DrainTimeout: 90 * time.Second,
	})
	if res.violation() {
		t.Fatalf("checker failed: %s", res.FinalLine)
	}
	if len(res.Findings) > 0 {
		t.Fatalf("fault checks failed: %q", res.Findings)
	}
	if res.Parks < 1 || res.Released == 0 || res.Replaces < 1 || res.Rollbacks < 1 {
		t.Fatalf("too few lifecycle faults to mean anything: %d parks (%.0f events released), %d replaces, %d rollbacks",
			res.Parks, res.Released, res.Replaces, res.Rollbacks)
	}
	if !strings.Contains(out, "park: the hub released") || !strings.Contains(res.FinalLine, " lost=0 duplicate_completions=0 phantoms=0 ") {
		t.Fatalf("report or final line %q", res.FinalLine)
	}
}

// TestChaos_PowerCut is the short power-cut run: every box's data dir on
// forgetfs, power cuts of L1, the hub and the edge (half of them tearing
// one file's unsynced pages), and the checker must pass.
func TestChaos_PowerCut(t *testing.T) {
	requireForgetfs(t)
	res, _ := runChaos(t, options{
		Duration:     50 * time.Second,
		Seed:         4,
		Edges:        1,
		Transport:    "mixed",
		Faults:       map[string]bool{faultPowerCut: true},
		FaultEvery:   3 * time.Second,
		DrainTimeout: 90 * time.Second,
	})
	if res.violation() {
		t.Fatalf("checker failed: %s", res.FinalLine)
	}
	if len(res.Findings) > 0 {
		t.Fatalf("fault checks failed: %q", res.Findings)
	}
	if res.PowerCuts < 10 {
		t.Fatalf("too few power cuts to mean anything: %d", res.PowerCuts)
	}
	if !strings.Contains(res.FinalLine, " lost=0 duplicate_completions=0 phantoms=0 ") {
		t.Fatalf("final line %q", res.FinalLine)
	}
}

// TestChaos_PowerCutUnsafeSync is the power cut's negative control: with
// the 2-minute sync interval a PubAck means the page cache, and the
// checker must see what the cuts lose.
func TestChaos_PowerCutUnsafeSync(t *testing.T) {
	requireForgetfs(t)
	res, out := runChaos(t, options{
		Duration:     30 * time.Second,
		Seed:         5,
		Edges:        1,
		UnsafeSync:   true,
		Faults:       map[string]bool{faultPowerCut: true},
		FaultEvery:   3 * time.Second,
		DrainTimeout: 60 * time.Second,
		DrainStall:   20 * time.Second,
	})
	if res.Lost == 0 || res.exitCode(nil) == exitOK {
		t.Fatalf("unsafe sync: the checker saw no loss (%s)", res.FinalLine)
	}
	if !strings.Contains(out, "negative control (--unsafe-sync): the checker saw the loss") {
		t.Fatalf("report does not say the loss was seen")
	}
}

// requireForgetfs skips the test where forgetfs cannot be mounted.
func requireForgetfs(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs L1, hub and edges as processes for minutes; skipped with -short")
	}
	f, err := forgetfs.Mount(t.TempDir(), t.TempDir(), forgetfs.Options{})
	if errors.Is(err, forgetfs.ErrUnavailable) {
		t.Skipf("the powercut fault needs forgetfs, and this host cannot mount it: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
}

func TestFailpointIn(t *testing.T) {
	log := "time=... level=INFO msg=x\nfailpoint edge.after_mark: SIGKILL\n=== chaos: start #3\nfailpoint edge.before_puback: SIGKILL\n"
	if got := failpointIn(log); got != "edge.before_puback" {
		t.Fatalf("got %q", got)
	}
	if got := failpointIn("level=ERROR msg=crash"); got != "" {
		t.Fatalf("got %q", got)
	}
}

func TestParseMetrics(t *testing.T) {
	m := parseMetrics([]byte(`# HELP leafline_completion_applied_total x
leafline_completion_applied_total{role="l1",site="l1"} 42
leafline_source_lag{role="hub",site="hub",source="a",stream="RH"} 3
leafline_source_lag{role="hub",site="hub",source="b",stream="RH"} 4
go_goroutines 12
`))
	if m["leafline_completion_applied_total"] != 42 || m["leafline_source_lag"] != 7 || len(m) != 2 {
		t.Fatalf("%v", m)
	}
}

// TestDamage checks that every corruption mode produces damage the outbox
// refuses, at Open or (record-data) at Check, with an error naming the file.
func TestDamage(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	ob, err := outbox.Open(good, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		recs := make([]outbox.Record, 100)
		for j := range recs {
			recs[j] = outbox.Record{Key: fmt.Sprintf("rcpt-%d-%d", i, j), Subject: "leafline.receipts.edge1.processed", Data: bytes.Repeat([]byte("r"), 200)}
		}
		if _, err := ob.Commit(recs, nil); err != nil {
			t.Fatal(err)
		}
	}
	ob.Close()
	orig, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range corruptModes {
		for seed := uint64(1); seed <= 5; seed++ {
			t.Run(fmt.Sprintf("%s/%d", mode, seed), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "outbox.db")
				if err := os.WriteFile(path, orig, 0o600); err != nil {
					t.Fatal(err)
				}
				what, err := damage(path, mode, rand.New(rand.NewPCG(seed, 1)))
				if err != nil {
					t.Fatal(err)
				}
				ob, err := outbox.Open(path, outbox.Options{OpenTimeout: time.Second})
				if err == nil {
					err = ob.Check()
					ob.Close()
					if mode != "record-data" {
						t.Errorf("%s: Open accepted the file", what)
					} else {
						t.Logf("%s: Open accepted the file; Check refused it: %v", what, err)
					}
				}
				if err == nil || !strings.Contains(err.Error(), path) {
					t.Fatalf("%s: want an error naming %s, got %v", what, path, err)
				}
			})
		}
	}
}

// An expired event that another receipt conflicted with fails the run.
func TestResult_ExpiredConflictIsViolation(t *testing.T) {
	if !(&result{ExpiredConflicts: 1}).violation() {
		t.Error("an expired event with another status is not a violation")
	}
}

// replace and rollback need the relay on every link; the default fault
// list leaves them out with a sourcing link instead of refusing.
func TestOptions_RelayOnlyFaults(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--transport", "mixed", "--faults", "kill,replace"}, false},
		{[]string{"--transport", "sourcing", "--faults", "all"}, false},
		{[]string{"--transport", "sourcing", "--faults", "rollback"}, false},
		{[]string{"--transport", "relay", "--faults", "replace,rollback,park"}, true},
		{[]string{"--faults", "replace,rollback"}, true},
	} {
		o := options{Transport: c.args[1], Faults: parseFaults(c.args[len(c.args)-1])}
		if c.args[0] != "--transport" {
			o = options{Faults: parseFaults(c.args[1])}
		}
		o.defaults()
		err := o.validate()
		if (err == nil) != c.ok {
			t.Errorf("%q: validate = %v", c.args, err)
		}
		if err != nil && !strings.Contains(err.Error(), "only relay links survive") {
			t.Errorf("%q: the error does not say why: %v", c.args, err)
		}
	}
	for _, tr := range []string{"sourcing", "mixed"} {
		f := parseFaults(defaultFaults(options{Transport: tr}))
		if f[faultReplace] || f[faultRollback] || !f[faultKill] || !f[faultPark] {
			t.Errorf("default faults with --transport %s: %s", tr, faultList(f))
		}
	}
	if f := parseFaults(defaultFaults(options{})); !f[faultReplace] || !f[faultRollback] {
		t.Errorf("default faults: %s", faultList(f))
	}
}

// A file sink's file that a replace or a rollback destroyed with the
// edge's data dir is counted as gone, not missing; a file missing that no
// wipe took is still missing.
func TestCheckHeld_Wiped(t *testing.T) {
	obs := check.NewObserver([]string{"edge2"})
	for n := range 3 {
		obs.Observe(processedBy(t, uint64(n+1), check.EventID(n), "edge2"))
	}
	held := map[string]bool{check.EventID(0): true}
	wiped := map[string]bool{check.EventID(1): true}
	dir := t.TempDir()
	rec := faultlog.New(io.Discard, false, filepath.Join(dir, "chaos.log"))
	defer rec.Close()
	checked, missing, gone := checkHeld("edge2's file sink", "edge2",
		func(id string) (bool, error) { return held[id], nil }, func(id string) bool { return wiped[id] }, obs, rec)
	if checked != 2 || missing != 1 || gone != 1 {
		t.Fatalf("checked=%d missing=%d gone=%d, want 2, 1, 1", checked, missing, gone)
	}
	if f := rec.Findings(); len(f) != 1 || !strings.Contains(f[0], check.EventID(2)) {
		t.Fatalf("findings %q, want one naming %s", f, check.EventID(2))
	}
}

// processedBy is a completion record of id, processed by edge.
func processedBy(t *testing.T, rev uint64, id, edge string) kvEntry {
	t.Helper()
	b, err := json.Marshal(record.Completion{EventID: id, OriginStream: "L1A", Processors: map[string]record.ProcessorRecord{
		edge: {Status: receipt.StatusProcessed, Site: edge, ReceiptID: "r-" + id, ReceivedAt: time.Unix(1, 0)}}})
	if err != nil {
		t.Fatal(err)
	}
	return kvEntry{key: kvstore.KVKey(id), val: b, rev: rev}
}

// kvEntry is a put of a completion record, as the Observer reads one.
type kvEntry struct {
	key string
	val []byte
	rev uint64
}

func (e kvEntry) Bucket() string                  { return "test" }
func (e kvEntry) Key() string                     { return e.key }
func (e kvEntry) Value() []byte                   { return e.val }
func (e kvEntry) Revision() uint64                { return e.rev }
func (e kvEntry) Created() time.Time              { return time.Time{} }
func (e kvEntry) Delta() uint64                   { return 0 }
func (e kvEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
