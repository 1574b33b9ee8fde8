package state

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jstest"
)

func openTest(t *testing.T, js jetstream.JetStream, path string, mod ...func(*Config)) *State {
	t.Helper()
	cfg := Config{JS: js, Path: path, ImportBucket: "-", Sites: diffSites, HoldUntilOrigin: true, Logger: quietLog()}
	for _, m := range mod {
		m(&cfg)
	}
	st, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

// feed applies h to st.
func feed(t *testing.T, st record.State, h history) {
	t.Helper()
	for _, s := range h {
		s.apply(t, context.Background(), st)
	}
}

func eventIDs(h history) []string {
	set := map[string]bool{}
	var ids []string
	for _, st := range h {
		for _, it := range st.receipts {
			if !set[it.Receipt.EventID] {
				set[it.Receipt.EventID] = true
				ids = append(ids, it.Receipt.EventID)
			}
		}
		for _, o := range st.origins {
			if !set[o.EventID] {
				set[o.EventID] = true
				ids = append(ids, o.EventID)
			}
		}
	}
	return ids
}

// TestState_FileLost_RebuiltFromLog: a box whose file is gone folds the
// whole log again and answers exactly as before.
func TestState_FileLost_RebuiltFromLog(t *testing.T) {
	js := jstest.Connect(t, jstest.Start(t, jstest.Options{}))
	path := filepath.Join(t.TempDir(), "state.db")
	h := recordHistory(2, 200, time.Now().UTC())
	st := openTest(t, js, path)
	feed(t, st, h)
	want := answers(t, context.Background(), st, eventIDs(h))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	again := openTest(t, js, path)
	if got := again.Stats(); got.Rebuilt == "" || got.Applied != st.Stats().Applied {
		t.Fatalf("after losing the file: %+v, want rebuilt up to %d", got, st.Stats().Applied)
	}
	if d := diff(want, answers(t, context.Background(), again, eventIDs(h))); d != "" {
		t.Fatalf("rebuilt state answers differently:\n%s", d)
	}
}

// TestState_CorruptFile_MovedAsideAndRebuilt: a file that is not a state
// file is kept aside for an operator and the state rebuilt from the log.
func TestState_CorruptFile_MovedAsideAndRebuilt(t *testing.T) {
	js := jstest.Connect(t, jstest.Start(t, jstest.Options{}))
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	h := recordHistory(3, 100, time.Now().UTC())
	st := openTest(t, js, path)
	feed(t, st, h)
	want := answers(t, context.Background(), st, eventIDs(h))
	st.Close()
	if err := os.WriteFile(path, []byte(strings.Repeat("not a bbolt file ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	again := openTest(t, js, path)
	if !strings.Contains(again.Stats().Rebuilt, "unreadable") {
		t.Fatalf("Rebuilt = %q, want the file named unreadable", again.Stats().Rebuilt)
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("files moved aside: %v, want one", aside)
	}
	if d := diff(want, answers(t, context.Background(), again, eventIDs(h))); d != "" {
		t.Fatalf("rebuilt state answers differently:\n%s", d)
	}
}

// TestState_Restart_FoldsOnlyWhatIsNew: a restart resumes from the file's
// checkpoint, and folds what other boxes appended meanwhile.
func TestState_Restart_FoldsOnlyWhatIsNew(t *testing.T) {
	js := jstest.Connect(t, jstest.Start(t, jstest.Options{}))
	dir := t.TempDir()
	h := recordHistory(4, 200, time.Now().UTC())
	a := openTest(t, js, filepath.Join(dir, "a.db"))
	feed(t, a, h[:len(h)/2])
	a.Close()
	b := openTest(t, js, filepath.Join(dir, "b.db"))
	feed(t, b, h[len(h)/2:])
	a = openTest(t, js, filepath.Join(dir, "a.db"))
	if a.Stats().Rebuilt != "" {
		t.Fatalf("a restart rebuilt the file: %q", a.Stats().Rebuilt)
	}
	waitCaughtUp(t, context.Background(), a, b)
	if d := diff(answers(t, context.Background(), b, eventIDs(h)), answers(t, context.Background(), a, eventIDs(h))); d != "" {
		t.Fatalf("restarted box answers differently:\n%s", d)
	}
}

// TestState_LogCreatedAgain_Rebuilds: a file folded from a log that was
// deleted is emptied and folds the new log, never mixing the two.
func TestState_LogCreatedAgain_Rebuilds(t *testing.T) {
	js := jstest.Connect(t, jstest.Start(t, jstest.Options{}))
	path := filepath.Join(t.TempDir(), "state.db")
	st := openTest(t, js, path)
	feed(t, st, recordHistory(5, 50, time.Now().UTC()))
	st.Close()
	if err := js.DeleteStream(context.Background(), DefaultLogStream); err != nil {
		t.Fatal(err)
	}
	again := openTest(t, js, path)
	sum, err := again.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Events != 0 || !strings.Contains(again.Stats().Rebuilt, "created again") {
		t.Fatalf("after the log was created again: %d events, rebuilt %q; want 0 and a rebuild", sum.Events, again.Stats().Rebuilt)
	}
}

// TestState_Upgrade_ImportsKVStore: an L1 whose completions are in
// today's KV layout starts on the local state without losing one: the
// records written by Store are imported, and the answers are the
// Store's.
func TestState_Upgrade_ImportsKVStore(t *testing.T) {
	js := jstest.Connect(t, jstest.Start(t, jstest.Options{}))
	ctx := context.Background()
	h := recordHistory(6, 300, time.Now().UTC())
	kv, err := kvstore.OpenStore(ctx, kvstore.StoreConfig{JS: js, Bucket: "leafline_completions", Create: true, Sites: diffSites, HoldUntilOrigin: true})
	if err != nil {
		t.Fatal(err)
	}
	feed(t, kv, h[:len(h)-1]) // not the last step: keep some receipts held
	want := answers(t, ctx, kv, eventIDs(h))
	st := openTest(t, js, filepath.Join(t.TempDir(), "state.db"), func(c *Config) { c.ImportBucket = "" })
	if d := diff(want, answers(t, ctx, st, eventIDs(h))); d != "" {
		t.Fatalf("imported state answers differently:\n%s", d)
	}
	// And it goes on from there as the Store would.
	last := h[len(h)-1:]
	a, b := last[0].apply(t, ctx, kv), last[0].apply(t, ctx, st)
	if d := diff(a, b); d != "" {
		t.Fatalf("after the import, answers differ:\n%s", d)
	}
}

// TestState_Import_CutShort_DoneAgain: an import interrupted after its
// first entries is done again by the next box that opens the log.
func TestState_Import_CutShort_DoneAgain(t *testing.T) {
	js := jstest.Connect(t, jstest.Start(t, jstest.Options{}))
	ctx := context.Background()
	h := recordHistory(7, 100, time.Now().UTC())
	kv, err := kvstore.OpenStore(ctx, kvstore.StoreConfig{JS: js, Bucket: "leafline_completions", Create: true, Sites: diffSites, HoldUntilOrigin: true})
	if err != nil {
		t.Fatal(err)
	}
	feed(t, kv, h)
	// A box that wrote "begin" and one entry of records, then died.
	lg, err := openLog(ctx, Config{JS: js, LogStream: DefaultLogStream, Replicas: 1, MaxEntryBytes: DefaultMaxEntryBytes, OpTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range []string{`{"v":1,"import":"begin"}`, `{"v":1,"import":"records","records":[]}`} {
		if _, err := lg.append(ctx, []byte(e), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	st := openTest(t, js, filepath.Join(t.TempDir(), "state.db"), func(c *Config) { c.ImportBucket = "" })
	if d := diff(answers(t, ctx, kv, eventIDs(h)), answers(t, ctx, st, eventIDs(h))); d != "" {
		t.Fatalf("state after a resumed import answers differently:\n%s", d)
	}
}

// TestConfig_Validate_ReportsEveryProblem names each bad field at once.
func TestConfig_Validate_ReportsEveryProblem(t *testing.T) {
	c := Config{Replicas: 9, MaxEntryBytes: 1, MaxInputs: -1, OverdueAfter: -1}
	err := c.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"JS: required", "Path: required", "Replicas", "MaxEntryBytes", "MaxInputs", "OverdueAfter"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; does not name %s", err, want)
		}
	}
}

// TestState_NotReady_AnswersNothing: before it has folded the log, a
// State answers ErrNotReady, never a partial state.
func TestState_NotReady_AnswersNothing(t *testing.T) {
	st := &State{cfg: Config{OverdueAfter: time.Minute, Now: time.Now}, stop: make(chan struct{}), target: 10}
	for name, err := range map[string]error{
		"get": func() error { _, err := st.Get(context.Background(), "e1"); return err }(),
		"list": func() error {
			_, _, err := st.List(context.Background(), record.ListQuery{Status: record.ListPending})
			return err
		}(),
		"summary": func() error { _, err := st.Summary(context.Background()); return err }(),
		"apply":   st.ApplyBatch(context.Background(), []record.BatchItem{{}})[0].Err,
	} {
		if !errors.Is(err, record.ErrNotReady) {
			t.Errorf("%s before ready: %v, want ErrNotReady", name, err)
		}
	}
}
