package cleanup_test

import (
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

// TestCleaner_HeadPurgeAndSingles: the done events at the head of the
// stream go in one purge, those behind a pending event one by one, and
// every one of them has its audit record; the pending one stays.
func TestCleaner_HeadPurgeAndSingles(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	const n = 1200 // more than one audit batch
	seqs := make([]uint64, n)
	for i := range n {
		id := receipttest.EventID(i)
		seqs[i] = e.publish(t, id, "events.a", false, true, "edge-1")
		if i != n/2 {
			e.report(t, id, "edge-1", receipt.StatusProcessed, time.Minute)
		}
	}
	// One record is there already, as if a pass had died after writing
	// it: its batch is refused whole and written one by one.
	c := e.cleaner(t, js)
	first := receipttest.EventID(3)
	writeAuditRecord(t, js, first, seqs[3])

	rep := e.pass(t, c, false, 2*time.Hour)
	if rep.Deleted != n-1 || rep.Skipped[cleanup.SkipPending] != 1 {
		t.Fatalf("pass: %+v", rep)
	}
	for i, seq := range seqs {
		if e.present(t, seq) != (i == n/2) {
			t.Fatalf("event %d: present %v", i, e.present(t, seq))
		}
	}
	if got := auditCount(t, js); got != n-1 {
		t.Fatalf("audit records: %d, want %d", got, n-1)
	}
	if s := c.Stats(); s.Deleted != n-1 || s.Purged != n/2 {
		t.Fatalf("stats: %+v", s)
	}
	// The pending one completes: the next pass takes it, and nothing is
	// counted twice.
	e.report(t, receipttest.EventID(n/2), "edge-1", receipt.StatusProcessed, time.Minute)
	if rep := e.pass(t, c, false, 3*time.Hour); rep.Deleted != 1 || e.present(t, seqs[n/2]) {
		t.Fatalf("second pass: %+v", rep)
	}
	if s := c.Stats(); s.Deleted != n {
		t.Fatalf("stats: %+v", s)
	}
}

// writeAuditRecord stores an audit record for (id, seq) as the cleaner
// would have.
func writeAuditRecord(t *testing.T, js jetstream.JetStream, id string, seq uint64) {
	t.Helper()
	m := nats.NewMsg(cleanup.DefaultAuditSubject + "." + base64.RawURLEncoding.EncodeToString([]byte(id)) + "." + fmt.Sprint(seq))
	m.Data = []byte(`{"v":1,"event_id":"` + id + `"}`)
	if _, err := js.PublishMsg(jstest.Ctx(t), m); err != nil {
		t.Fatal(err)
	}
}

// TestCleaner_Pressure: from PressureAt full, done events go after
// PressureGrace instead of Grace; below it, after Grace again.
func TestCleaner_Pressure(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	st, err := js.Stream(jstest.Ctx(t), "L1A")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgs = 10
	if _, err := js.UpdateStream(jstest.Ctx(t), cfg); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		id := receipttest.EventID(i)
		e.publish(t, id, "events.a", false, true, "edge-1")
		e.report(t, id, "edge-1", receipt.StatusProcessed, time.Minute)
	}
	c := e.cleaner(t, js)
	// 40% full: the grace holds them.
	if rep := e.pass(t, c, false, 10*time.Minute); rep.Deleted != 0 || rep.Pressure || c.Pressure() {
		t.Fatalf("below pressure: %+v", rep)
	}
	for i := 4; i < 6; i++ {
		id := receipttest.EventID(i)
		e.publish(t, id, "events.a", false, true, "edge-1")
		e.report(t, id, "edge-1", receipt.StatusProcessed, time.Minute)
	}
	// 60% full: two seconds after its receipt a done event goes.
	rep := e.pass(t, c, false, 10*time.Minute)
	if rep.Deleted != 6 || !rep.Pressure || rep.Grace != cleanup.DefaultPressureGrace || !c.Pressure() {
		t.Fatalf("under pressure: %+v", rep)
	}
	if got := auditCount(t, js); got != 6 {
		t.Fatalf("audit records: %d", got)
	}
}

// TestCleaner_AuditStreamBounded: the audit stream the cleaner makes
// drops its oldest records past its limits rather than stop the deletes.
func TestCleaner_AuditStreamBounded(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	e.cleaner(t, js)
	st, err := js.Stream(jstest.Ctx(t), cleanup.DefaultAuditStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Discard != jetstream.DiscardOld || cfg.MaxBytes != cleanup.DefaultAuditMaxBytes || !cfg.AllowAtomicPublish {
		t.Fatalf("audit stream: discard %v max_bytes %d atomic %v", cfg.Discard, cfg.MaxBytes, cfg.AllowAtomicPublish)
	}
}

// TestCleaner_BackToTheHead: a pass that stopped at MaxPerPass goes on from
// its cursor while the head's event is pending, and from the head again,
// purging it with what follows, once the head's event is done.
func TestCleaner_BackToTheHead(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	const n = 300
	for i := range n {
		id := receipttest.EventID(i)
		e.publish(t, id, "events.a", false, true, "edge-1")
		if i != 0 {
			e.report(t, id, "edge-1", receipt.StatusProcessed, time.Minute)
		}
	}
	c := e.cleaner(t, js, func(c *cleanup.CleanupConfig) { c.MaxPerPass = 100 })
	if rep := e.pass(t, c, false, 2*time.Hour); rep.Deleted != 99 || c.Stats().Purged != 0 {
		t.Fatalf("first pass, head pending: %+v %+v", rep, c.Stats())
	}
	if rep := e.pass(t, c, false, 2*time.Hour); rep.Deleted != 100 || c.Stats().Purged != 0 {
		t.Fatalf("second pass, from the cursor: %+v %+v", rep, c.Stats())
	}
	e.report(t, receipttest.EventID(0), "edge-1", receipt.StatusProcessed, time.Minute)
	// The head can go: the pass starts there and purges it and the 100
	// messages after what was deleted one by one.
	if rep := e.pass(t, c, false, 2*time.Hour); rep.Deleted != 100 || c.Stats().Purged != 100 {
		t.Fatalf("third pass, head done: %+v %+v", rep, c.Stats())
	}
	if got := auditCount(t, js); got != 299 {
		t.Fatalf("audit records: %d", got)
	}
}
