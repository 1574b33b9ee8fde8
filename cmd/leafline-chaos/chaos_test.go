//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	if len(os.Args) > 1 && os.Args[1] == receiveCommand {
		os.Exit(runReceive(os.Args[2:]))
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
		Duration:     75 * time.Second,
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
	if !strings.HasPrefix(res.FinalLine, "chaos seed=1 duration=1m15s events=") || !strings.Contains(res.FinalLine, " lost=0 duplicate_completions=0 phantoms=0 max_drain_s=") {
		t.Fatalf("final line %q", res.FinalLine)
	}
}

// TestChaos_ShortHTTP is a short positive run with edge1 on the http sink:
// a receiver process behind it, killed with the boxes, must hold every
// event L1 records as processed.
func TestChaos_ShortHTTP(t *testing.T) {
	res, out := runChaos(t, options{
		Duration:     45 * time.Second,
		Seed:         3,
		Edges:        1,
		Sink:         "http",
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

// fakeEntry is a KV entry for the observer tests.
type fakeEntry struct {
	key string
	val []byte
	rev uint64
	op  jetstream.KeyValueOp
}

func (e fakeEntry) Bucket() string                  { return "leafline_completions" }
func (e fakeEntry) Key() string                     { return e.key }
func (e fakeEntry) Value() []byte                   { return e.val }
func (e fakeEntry) Revision() uint64                { return e.rev }
func (e fakeEntry) Created() time.Time              { return time.Time{} }
func (e fakeEntry) Delta() uint64                   { return 0 }
func (e fakeEntry) Operation() jetstream.KeyValueOp { return e.op }

func entry(t *testing.T, rev uint64, id string, procs map[string]record.ProcessorRecord) fakeEntry {
	t.Helper()
	b, err := json.Marshal(record.Completion{EventID: id, OriginStream: "L1A", Processors: procs})
	if err != nil {
		t.Fatal(err)
	}
	return fakeEntry{key: "e." + base64.RawURLEncoding.EncodeToString([]byte(id)), val: b, rev: rev, op: jetstream.KeyValuePut}
}

func TestObserver(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pr := func(rid string, dups int) record.ProcessorRecord {
		return record.ProcessorRecord{Status: receipt.StatusProcessed, Site: "x", ReceiptID: rid, ReceivedAt: at, Duplicates: dups}
	}
	o := newObserver([]string{"edge1", "edge2"})
	states := []byte{stAcked, stAcked, stAcked, stUnknown, stAcked, stAcked}
	for _, e := range []fakeEntry{
		// ev-0: complete, then a duplicate absorbed (same first record).
		entry(t, 1, "ev-0", map[string]record.ProcessorRecord{"edge1": pr("a", 0)}),
		entry(t, 2, "ev-0", map[string]record.ProcessorRecord{"edge1": pr("a", 0), "edge2": pr("b", 0)}),
		entry(t, 3, "ev-0", map[string]record.ProcessorRecord{"edge1": pr("a", 2), "edge2": pr("b", 0)}),
		// ev-1: only edge1 reported: lost.
		entry(t, 4, "ev-1", map[string]record.ProcessorRecord{"edge1": pr("c", 0)}),
		// ev-2: edge2's first record replaced by another receipt: applied twice.
		entry(t, 5, "ev-2", map[string]record.ProcessorRecord{"edge1": pr("d", 0), "edge2": pr("e", 0)}),
		entry(t, 6, "ev-2", map[string]record.ProcessorRecord{"edge1": pr("d", 0), "edge2": pr("f", 0)}),
		// ev-3: unknown outcome, never completed: fine.
		// ev-4: complete, then edge2 vanished from the record: regression (and lost).
		entry(t, 7, "ev-4", map[string]record.ProcessorRecord{"edge1": pr("g", 0), "edge2": pr("h", 0)}),
		entry(t, 8, "ev-4", map[string]record.ProcessorRecord{"edge1": pr("g", 0)}),
		// ev-5: complete, revisions seen out of order (final read after live watch).
		entry(t, 10, "ev-5", map[string]record.ProcessorRecord{"edge1": pr("i", 0), "edge2": pr("j", 0)}),
		entry(t, 9, "ev-5", map[string]record.ProcessorRecord{"edge1": pr("i", 0)}),
		// Phantoms: an id the driver never used, one beyond what it published.
		entry(t, 11, "someone-else", map[string]record.ProcessorRecord{"edge1": pr("k", 0)}),
		entry(t, 12, "ev-99", map[string]record.ProcessorRecord{"edge1": pr("l", 0)}),
		// A processor that is not an edge of the topology.
		entry(t, 13, "ev-0", map[string]record.ProcessorRecord{"edge1": pr("a", 2), "edge2": pr("b", 0), "edge9": pr("m", 0)}),
	} {
		o.observe(e)
		o.observe(e) // each revision may be seen twice (live and final)
	}
	v := o.verdict(states)
	want := verdict{published: 6, acked: 5, unknown: 1, completeAcked: 3, lost: 2, dupKV: 1, phantoms: 3, regressions: 1, duplicatesAbsorbed: 2}
	got := verdict{published: v.published, acked: v.acked, unknown: v.unknown, completeAcked: v.completeAcked, lost: v.lost,
		dupKV: v.dupKV, phantoms: v.phantoms, regressions: v.regressions, duplicatesAbsorbed: v.duplicatesAbsorbed}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("verdict\n got %+v\nwant %+v\nlost: %q\ndups: %q\nphantoms: %q\nregressions: %q",
			got, want, v.lostExamples, v.dupExamples, v.phantomExamples, v.regressionExamples)
	}
	if missing, complete := o.remaining(states); missing != 2 || complete != 3 {
		t.Fatalf("remaining: missing %d complete %d", missing, complete)
	}
}

func TestEventNum(t *testing.T) {
	for _, tc := range []struct {
		id   string
		n    int
		isOK bool
	}{
		{"ev-0", 0, true}, {"ev-123", 123, true}, {"ev-", 0, false}, {"ev-01", 0, false},
		{"ev--1", 0, false}, {"ev-1x", 0, false}, {"ev-+1", 0, false}, {"x-1", 0, false},
	} {
		n, ok := eventNum(tc.id)
		if ok != tc.isOK || (ok && n != tc.n) || (ok && eventID(n) != tc.id) {
			t.Errorf("eventNum(%q) = %d, %t", tc.id, n, ok)
		}
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

// An expired record is terminal; an expired record that another receipt of
// the same processor conflicted with is a violation.
func TestObserver_Expired(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pr := func(st receipt.Status, rid string, conflicts int) record.ProcessorRecord {
		return record.ProcessorRecord{Status: st, Site: "x", ReceiptID: rid, ReceivedAt: at, Conflicts: conflicts}
	}
	o := newObserver([]string{"edge1"})
	states := []byte{stAcked, stAcked}
	for _, e := range []fakeEntry{
		entry(t, 1, "ev-0", map[string]record.ProcessorRecord{"edge1": pr(receipt.StatusExpired, "a", 0)}),
		entry(t, 2, "ev-1", map[string]record.ProcessorRecord{"edge1": pr(receipt.StatusExpired, "b", 0)}),
		entry(t, 3, "ev-1", map[string]record.ProcessorRecord{"edge1": pr(receipt.StatusExpired, "b", 1)}),
	} {
		o.observe(e)
	}
	v := o.verdict(states)
	if v.lost != 0 || v.completeAcked != 2 {
		t.Errorf("lost %d complete %d, want 0 and 2: expired is terminal (%q)", v.lost, v.completeAcked, v.lostExamples)
	}
	if v.expiredConflicts != 1 || len(v.expiredConflictExamples) != 1 || !strings.Contains(v.expiredConflictExamples[0], "ev-1") {
		t.Errorf("expired conflicts %d %q, want ev-1 alone", v.expiredConflicts, v.expiredConflictExamples)
	}
	if r := (&result{ExpiredConflicts: v.expiredConflicts}); !r.violation() {
		t.Error("an expired event with another status is not a violation")
	}
}
