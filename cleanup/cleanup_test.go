package cleanup_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

// cleanupHeader carries the test events' event_id: not Nats-Msg-Id, so that
// a redrive copy is not dropped by the origin stream's duplicate window.
const cleanupHeader = "Event-Id"

// cleanupEnv is an origin stream, an indexed store and the time the test's
// events were published (every pass runs at t0 plus some hours: the grace
// period is an hour, and nothing sleeps).
type cleanupEnv struct {
	js jetstream.JetStream
	st *kvstore.Store
	t0 time.Time
}

func newCleanupEnv(t testing.TB, js jetstream.JetStream) *cleanupEnv {
	t.Helper()
	ctx := jstest.Ctx(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "L1A", Subjects: []string{"events.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	st, err := kvstore.OpenStore(ctx, kvstore.StoreConfig{JS: js, Create: true, HoldUntilOrigin: true})
	if err != nil {
		t.Fatal(err)
	}
	return &cleanupEnv{js: js, st: st, t0: time.Now()}
}

// publish stores an event on subject (a redrive copy with redrive) and
// returns its sequence; track also records its origin, routed to procs.
func (e *cleanupEnv) publish(t testing.TB, id, subject string, redrive, track bool, procs ...string) uint64 {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte("payload of " + id)
	m.Header.Set(cleanupHeader, id)
	if redrive {
		m.Header.Set(receipt.RedriveHeader, "1")
	}
	pa, err := e.js.PublishMsg(jstest.Ctx(t), m)
	if err != nil {
		t.Fatal(err)
	}
	if track {
		e.track(t, id, subject, pa.Sequence, procs...)
	}
	return pa.Sequence
}

func (e *cleanupEnv) track(t testing.TB, id, subject string, seq uint64, procs ...string) {
	t.Helper()
	o := record.Origin{EventID: id, Stream: "L1A", Subject: subject, Seq: seq, PublishedAt: e.t0, Expected: procs}
	if _, err := e.st.ApplyOrigin(jstest.Ctx(t), o, e.t0); err != nil {
		t.Fatal(err)
	}
}

// report applies proc's receipt for id, received at t0+after.
func (e *cleanupEnv) report(t testing.TB, id, proc string, status receipt.Status, after time.Duration) {
	t.Helper()
	r := receipt.New(id, "L1A", proc, proc, status, e.t0)
	if status == receipt.StatusDeadLettered {
		r.Reason = "sink refused it"
	}
	if _, err := e.st.Apply(jstest.Ctx(t), r, e.t0.Add(after)); err != nil {
		t.Fatal(err)
	}
}

func (e *cleanupEnv) cleaner(t testing.TB, js jetstream.JetStream, mod ...func(*cleanup.CleanupConfig)) *cleanup.Cleaner {
	t.Helper()
	cfg := cleanup.CleanupConfig{JS: js, Store: e.st, OriginStream: "L1A", OriginHeader: cleanupHeader, Grace: time.Hour, DeletedBy: "test"}
	for _, f := range mod {
		f(&cfg)
	}
	c, err := cleanup.NewCleaner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Setup(jstest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *cleanupEnv) pass(t testing.TB, c *cleanup.Cleaner, dry bool, at time.Duration) cleanup.CleanupReport {
	t.Helper()
	rep, err := c.Pass(jstest.Ctx(t), dry, e.t0.Add(at))
	if err != nil {
		t.Fatalf("pass at t0+%s: %v", at, err)
	}
	return rep
}

// present reports whether the origin stream still holds seq.
func (e *cleanupEnv) present(t testing.TB, seq uint64) bool {
	t.Helper()
	st, err := e.js.Stream(jstest.Ctx(t), "L1A")
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.GetMsg(jstest.Ctx(t), seq)
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

func auditCount(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	st, err := js.Stream(jstest.Ctx(t), cleanup.DefaultAuditStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(jstest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestCleaner_Policy(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	done := e.publish(t, "done", "events.a", false, true, "edge-1", "edge-2")
	late := e.publish(t, "late", "events.b", false, true, "edge-1", "edge-2")
	dead := e.publish(t, "dead", "events.a", false, true, "edge-1")
	untracked := e.publish(t, "untracked", "events.a", false, false)
	e.report(t, "done", "edge-1", receipt.StatusProcessed, time.Minute)
	e.report(t, "done", "edge-2", receipt.StatusProcessed, 2*time.Minute)
	e.report(t, "late", "edge-1", receipt.StatusProcessed, time.Minute)
	e.report(t, "dead", "edge-1", receipt.StatusDeadLettered, time.Minute)
	c := e.cleaner(t, js)

	// Within the grace period nothing goes: the scan stops at the first
	// message younger than it, and a message older than it waits for the
	// grace period after its last receipt.
	if rep := e.pass(t, c, false, 30*time.Minute); rep.Deleted != 0 || rep.Examined != 0 {
		t.Fatalf("pass within grace: %+v", rep)
	}
	if rep := e.pass(t, c, false, 61*time.Minute); rep.Deleted != 0 || rep.Skipped[cleanup.SkipGrace] != 1 {
		t.Fatalf("pass within grace: %+v", rep)
	}
	dry := e.pass(t, c, true, 2*time.Hour)
	if dry.Eligible != 1 || dry.Deleted != 0 || dry.Subjects["events.a"] != 1 || dry.Sites["edge-2"] != 1 || dry.Bytes <= 0 ||
		dry.Skipped[cleanup.SkipPending] != 1 || dry.Skipped[cleanup.SkipDeadLettered] != 1 || dry.Skipped[cleanup.SkipUntracked] != 1 {
		t.Fatalf("dry run: %+v", dry)
	}
	if !e.present(t, done) {
		t.Fatal("the dry run deleted")
	}
	if rep := e.pass(t, c, false, 2*time.Hour); rep.Deleted != 1 {
		t.Fatalf("pass after grace: %+v", rep)
	}
	if e.present(t, done) || !e.present(t, late) || !e.present(t, dead) || !e.present(t, untracked) {
		t.Fatal("wrong messages deleted")
	}
	ents, err := c.Audit(jstest.Ctx(t), "done")
	if err != nil || len(ents) != 1 {
		t.Fatalf("audit: %v %+v", err, ents)
	}
	if r := ents[0].Record; r.Seq != done || r.Subject != "events.a" || len(r.Receipts) != 2 || r.Receipts[1].Processor != "edge-2" ||
		r.Receipts[1].ReceiptID == "" || r.DeletedBy != "test" || r.RedriveCopy {
		t.Fatalf("audit record: %+v", r)
	}
	comp, err := e.st.Get(jstest.Ctx(t), "done")
	if err != nil {
		t.Fatal(err)
	}
	if ref, err := c.Cleaned(jstest.Ctx(t), &comp); err != nil || ref == nil || ref.Seq != ents[0].Ref.Seq {
		t.Fatalf("cleaned ref: %v %+v", err, ref)
	}

	// An edge that reports only after the grace period: the grace runs
	// from its receipt, not from the publication.
	e.report(t, "late", "edge-2", receipt.StatusProcessed, 150*time.Minute)
	if rep := e.pass(t, c, false, 3*time.Hour); rep.Deleted != 0 || !e.present(t, late) {
		t.Fatalf("late report within its grace: %+v", rep)
	}
	if rep := e.pass(t, c, false, 4*time.Hour); rep.Deleted != 1 || e.present(t, late) {
		t.Fatalf("late report after its grace: %+v", rep)
	}

	// Dead-lettered events go only where the policy allows them.
	c2 := e.cleaner(t, js, func(c *cleanup.CleanupConfig) { c.AllowDeadLettered = true })
	if rep := e.pass(t, c2, false, 4*time.Hour); rep.Deleted != 1 || e.present(t, dead) {
		t.Fatalf("dead-lettered with the policy: %+v", rep)
	}
	if n := auditCount(t, js); n != 3 {
		t.Fatalf("audit records: %d, want 3", n)
	}
}

// TestCleaner_Mismatch_Refused recreates the origin stream under the
// records: each sequence now holds another event than the one recorded
// there. Nothing is deleted; each mismatch is counted once.
func TestCleaner_Mismatch_Refused(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	ctx := jstest.Ctx(t)
	for _, id := range []string{"a", "b"} {
		e.publish(t, id, "events.a", false, true, "edge-1")
		e.report(t, id, "edge-1", receipt.StatusProcessed, time.Minute)
	}
	if err := js.DeleteStream(ctx, "L1A"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "L1A", Subjects: []string{"events.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	e.publish(t, "b", "events.a", false, false) // seq 1, recorded at 2
	e.publish(t, "a", "events.a", false, false) // seq 2, recorded at 1
	c := e.cleaner(t, js)
	for range 2 {
		if rep := e.pass(t, c, false, 2*time.Hour); rep.Deleted != 0 || rep.Skipped[cleanup.SkipMismatch] != 2 {
			t.Fatalf("pass: %+v", rep)
		}
	}
	if !e.present(t, 1) || !e.present(t, 2) {
		t.Fatal("a mismatched message was deleted")
	}
	if s := c.Stats(); s.Mismatches != 2 || s.Deleted != 0 {
		t.Fatalf("stats: %+v", s)
	}
	if n := auditCount(t, js); n != 0 {
		t.Fatalf("audit records: %d, want none", n)
	}
}

// TestCleaner_Redrive: an event redriven while the cleaner runs keeps both
// its messages while the redrive is recent; then each goes with its own
// audit record, the copy marked as one.
func TestCleaner_Redrive(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	orig := e.publish(t, "r", "events.a", false, true, "edge-1", "edge-2")
	e.report(t, "r", "edge-1", receipt.StatusProcessed, time.Minute)
	redrivenAt := e.t0.Add(100 * time.Minute)
	c := e.cleaner(t, js, func(c *cleanup.CleanupConfig) {
		c.Redriven = func(id string) (time.Time, bool) { return redrivenAt, id == "r" }
	})
	if rep := e.pass(t, c, false, 80*time.Minute); rep.Skipped[cleanup.SkipPending] != 1 {
		t.Fatalf("pending: %+v", rep)
	}
	cp := e.publish(t, "r", "events.a", true, false) // the redrive's copy
	e.report(t, "r", "edge-2", receipt.StatusProcessed, 91*time.Minute)
	if rep := e.pass(t, c, false, 155*time.Minute); rep.Deleted != 0 || rep.Skipped[cleanup.SkipRedrivePending] != 2 {
		t.Fatalf("redrive pending: %+v", rep)
	}
	if rep := e.pass(t, c, false, 3*time.Hour); rep.Deleted != 2 || e.present(t, orig) || e.present(t, cp) {
		t.Fatalf("after the redrive's grace: %+v", rep)
	}
	ents, err := c.Audit(jstest.Ctx(t), "r")
	if err != nil || len(ents) != 2 || ents[0].Record.RedriveCopy == ents[1].Record.RedriveCopy {
		t.Fatalf("audit: %v %+v", err, ents)
	}
}

// TestCleaner_TwoAtOnce runs two cleaners on their own connections over the
// same events at once: each message is deleted once and has one record.
func TestCleaner_TwoAtOnce(t *testing.T) {
	srv, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	const n = 300
	for i := range n {
		id := receipttest.EventID(i)
		e.publish(t, id, "events.a", false, true, "edge-1")
		e.report(t, id, "edge-1", receipt.StatusProcessed, time.Minute)
	}
	a, b := e.cleaner(t, js), e.cleaner(t, jstest.Connect(t, srv))
	type res struct {
		rep cleanup.CleanupReport
		err error
	}
	ch := make(chan res, 2)
	for _, c := range []*cleanup.Cleaner{a, b} {
		go func() {
			rep, err := c.Pass(jstest.Ctx(t), false, e.t0.Add(2*time.Hour))
			ch <- res{rep, err}
		}()
	}
	deleted := 0
	for range 2 {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		deleted += r.rep.Deleted
	}
	if s := a.Stats().Deleted + b.Stats().Deleted; deleted != n || s != n {
		t.Fatalf("deleted %d (stats %d), want %d", deleted, s, n)
	}
	if got := auditCount(t, js); got != n {
		t.Fatalf("audit records: %d, want %d", got, n)
	}
	for i := range []int{0, n / 2, n - 1} {
		if ents, err := a.Audit(jstest.Ctx(t), receipttest.EventID(i)); err != nil || len(ents) != 1 {
			t.Fatalf("audit of %s: %v %d records", receipttest.EventID(i), err, len(ents))
		}
	}
}

func TestNewCleaner_Config(t *testing.T) {
	_, err := cleanup.NewCleaner(cleanup.CleanupConfig{OriginStream: "L1A", AuditStream: "L1A", AuditSubject: "a..b", Grace: -time.Second, MaxPerPass: -1})
	if !errors.Is(err, record.ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"JS: required", "Store: required", "AuditStream: must differ", "AuditSubject:", "Grace: must be positive", "MaxPerPass: must be"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// Expired events keep their origin message unless the policy allows them,
// as dead-lettered ones do; AllowDeadLettered alone does not allow them.
func TestCleaner_Policy_Expired(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	expired := e.publish(t, "expired", "events.a", false, true, "edge-1")
	e.report(t, "expired", "edge-1", receipt.StatusExpired, time.Minute)

	c := e.cleaner(t, js, func(c *cleanup.CleanupConfig) { c.AllowDeadLettered = true })
	if rep := e.pass(t, c, false, 2*time.Hour); rep.Deleted != 0 || rep.Skipped[cleanup.SkipExpired] != 1 || !e.present(t, expired) {
		t.Fatalf("expired without allow_expired: %+v", rep)
	}
	c2 := e.cleaner(t, js, func(c *cleanup.CleanupConfig) { c.AllowExpired = true })
	if rep := e.pass(t, c2, false, 2*time.Hour); rep.Deleted != 1 || e.present(t, expired) {
		t.Fatalf("expired with allow_expired: %+v", rep)
	}
	ents, err := c2.Audit(jstest.Ctx(t), "expired")
	if err != nil || len(ents) != 1 || len(ents[0].Record.Receipts) != 1 {
		t.Fatalf("audit: %v %+v", err, ents)
	}
}
