//go:build unix

package cleanup_test

import (
	"os"
	"testing"
	"time"

	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/internal/failpoint"
	"github.com/leafline/leafline/internal/failpoint/killtest"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
)

// cleanupChildEnv carries the server URL to the child process of
// TestCleaner_Failpoint_AfterAuditWrite; it also marks the process as the child.
const cleanupChildEnv = "LEAFLINE_CLEANUP_TEST_CHILD_URL"

// TestCleaner_Failpoint_AfterAuditWrite kills a cleaner (a child process)
// between the audit record's PubAck and the delete: the record is there
// and the message too; the next pass deletes it without a second record.
func TestCleaner_Failpoint_AfterAuditWrite(t *testing.T) {
	if url := os.Getenv(cleanupChildEnv); url != "" {
		runCleanupChild(t, url)
		return
	}
	if testing.Short() {
		t.Skip("runs a child process; skipped with -short")
	}
	srv, js := jstest.StartJS(t, jstest.Options{})
	e := newCleanupEnv(t, js)
	seq := e.publish(t, "crash", "events.a", false, true, "edge-1")
	e.report(t, "crash", "edge-1", receipt.StatusProcessed, time.Minute)

	killtest.RunUntilKilled(t, "TestCleaner_Failpoint_AfterAuditWrite", failpoint.L1AfterAuditWrite, cleanupChildEnv+"="+srv.ClientURL())
	// The record is durable; the delete did not happen.
	if n := auditCount(t, js); n != 1 || !e.present(t, seq) {
		t.Fatalf("after the kill: %d audit records, message present %v; want 1 and true", n, e.present(t, seq))
	}
	c := e.cleaner(t, js)
	if rep := e.pass(t, c, false, 2*time.Hour); rep.Deleted != 1 || e.present(t, seq) {
		t.Fatalf("next pass: %+v", rep)
	}
	if n := auditCount(t, js); n != 1 {
		t.Fatalf("audit records after the next pass: %d, want 1", n)
	}
}

// runCleanupChild runs one pass against the parent's server until the
// failpoint kills the process; returning at all is a failure.
func runCleanupChild(t *testing.T, url string) {
	js := jstest.ConnectURL(t, url)
	ctx := jstest.Ctx(t)
	st, err := kvstore.OpenStore(ctx, kvstore.StoreConfig{JS: js, HoldUntilOrigin: true})
	if err != nil {
		t.Fatal(err)
	}
	e := &cleanupEnv{js: js, st: st, t0: time.Now()}
	rep, err := e.cleaner(t, js).Pass(ctx, false, e.t0.Add(2*time.Hour))
	t.Fatalf("the failpoint did not kill the process (pass: %+v, %v)", rep, err)
}
