package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/cleanup"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/status"
)

// TestCleanupAndAuditCommands runs leafline cleanup and audit against a
// completion service: a done event's origin message goes with an audit
// record, a pending one stays, and the status API shows the deletion.
func TestCleanupAndAuditCommands(t *testing.T) {
	env := startStatusEnv(t)
	env.event(t, "done")
	env.event(t, "open")
	env.receipt(t, "done", "edge1", receipt.StatusProcessed)
	env.receipt(t, "done", "edge2", receipt.StatusProcessed)
	env.receipt(t, "open", "edge1", receipt.StatusProcessed)
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		c, err := env.svc.Get(context.Background(), "done")
		if err != nil || c.Status != record.EventComplete {
			return fmt.Errorf("done: %v %s", err, c.Status)
		}
		return nil
	})

	// With the policy turned off: --once refuses, --dry-run works.
	setCleanup(t, env.cfg, map[string]any{"enabled": false})
	if code, _, errs := runStatusCmd(cmdCleanup, "--config", env.cfg, "--once"); code != exitUsage || !strings.Contains(errs, "completion.cleanup.enabled is false") {
		t.Fatalf("--once with the policy off: %d %s", code, errs)
	}
	if code, _, errs := runStatusCmd(cmdCleanup, "--config", env.cfg, "--once", "--dry-run"); code != exitUsage || !strings.Contains(errs, "exactly one") {
		t.Fatalf("both flags: %d %s", code, errs)
	}
	setCleanup(t, env.cfg, map[string]any{"grace": "1ms"})
	code, out, errs := runStatusCmd(cmdCleanup, "--config", env.cfg, "--dry-run")
	if code != exitOK || !strings.Contains(out, "would delete 1 ") || !strings.Contains(out, "subject events.x") ||
		!strings.Contains(out, "site    edge2") || !strings.Contains(out, "kept    pending") {
		t.Fatalf("--dry-run: %d\n%s%s", code, out, errs)
	}
	code, out, errs = runStatusCmd(cmdCleanup, "--config", env.cfg, "--once")
	if code != exitOK || !strings.Contains(out, "deleted 1 ") {
		t.Fatalf("--once: %d\n%s%s", code, out, errs)
	}
	code, out, errs = runStatusCmd(cmdAudit, "--config", env.cfg, "done")
	var ents []cleanup.AuditEntry
	if code != exitOK || json.Unmarshal([]byte(out), &ents) != nil || len(ents) != 1 || len(ents[0].Record.Receipts) != 2 ||
		!strings.Contains(ents[0].Record.DeletedBy, "leafline cleanup --once") {
		t.Fatalf("audit done: %d\n%s%s", code, out, errs)
	}
	if code, _, errs := runStatusCmd(cmdAudit, "--config", env.cfg, "open"); code != exitFailure || !strings.Contains(errs, "no audit record") {
		t.Fatalf("audit open: %d %s", code, errs)
	}

	// The status API shows the deletion with a reference to its record.
	cl, err := cleanup.NewCleaner(cleanup.CleanupConfig{JS: env.js, Store: env.svc.State(), OriginStream: "L1A", Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	env.svc.AttachCleaner(cl)
	srv := httptest.NewServer(status.NewHTTPHandler(env.svc))
	defer srv.Close()
	resp, err := http.Get(srv.URL + status.EventPath("done"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c record.Completion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.Cleaned == nil || c.Cleaned.Seq != ents[0].Ref.Seq ||
		c.Cleaned.Stream != cleanup.DefaultAuditStream {
		t.Fatalf("status of done: %v %+v", err, c.Cleaned)
	}
}

// setCleanup sets completion.cleanup in the box config at path.
func setCleanup(t *testing.T, path string, cleanup map[string]any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["completion"] = map[string]any{"cleanup": cleanup}
	writeJSONFile(t, path, m)
}
