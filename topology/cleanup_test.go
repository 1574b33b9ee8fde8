package topology

import (
	"strings"
	"testing"
	"time"
)

// TestLint_Cleanup: L1's check warns when the cleanup is off, when it
// starts too late, and when the audit stream has no byte limit; a
// default L1 gets none of those.
func TestLint_Cleanup(t *testing.T) {
	tp := &Topology{Sites: []Site{{Name: "l1", Role: RoleL1}, {Name: "hub", Role: RoleHub, Upstream: "l1"}}}
	lint := func(cl CleanupConfig) []string {
		cl.setDefaults()
		c := &Config{Site: "l1", Topology: tp, JetStream: JetStreamConfig{SyncInterval: "always", MaxStreamBytes: 1 << 30}}
		c.Completion.Cleanup = cl
		var paths []string
		for _, w := range Lint(c) {
			if strings.HasPrefix(w.Path, "completion.cleanup.") {
				paths = append(paths, w.Path+": "+w.Msg)
			}
		}
		return paths
	}
	if got := lint(CleanupConfig{}); len(got) != 0 {
		t.Fatalf("defaults: %q", got)
	}
	off := false
	if got := lint(CleanupConfig{Enabled: &off}); len(got) != 1 || !strings.Contains(got[0], "refuses every publish") {
		t.Fatalf("off: %q", got)
	}
	if got := lint(CleanupConfig{PressureAt: 0.95, AuditMaxBytes: -1, AuditRetention: Duration(time.Hour)}); len(got) != 2 ||
		!strings.Contains(got[0], "pressure_at: 0.95") || !strings.Contains(got[1], "audit_max_bytes: -1") {
		t.Fatalf("late and unbounded: %q", got)
	}
}
