package edge

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/internal/check"

	"github.com/leafline/leafline/internal/logx/logxtest"
	"github.com/leafline/leafline/topology"
)

// TestRunner_DeadLetterLoggedAtWarn: every dead-lettering is one WARN line
// with the event_id (or why there is none) and the error type, and never
// the payload.
func TestRunner_DeadLetterLoggedAtWarn(t *testing.T) {
	f := newContractSite(t, contractOpts{
		configure: func(c *topology.Config) { c.DeadLetter.Enabled = true },
		script:    map[string][]sinkOutcome{"refused-1": {sinkPerm}},
	})
	var logs logxtest.Buffer
	f.ro.Log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "runner")
	secret := []byte(`{"card":"4111-SECRET"}`)
	seqs := f.publish(ctMsg{data: secret}, ctMsg{id: "refused-1", data: secret})
	f.start()
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if n := len(f.dlqRecords()); n != 2 {
			return fmt.Errorf("%d DLQ records", n)
		}
		if n := strings.Count(logs.String(), "dlq: dead-lettered"); n != 2 {
			return fmt.Errorf("%d dead-letter log lines", n)
		}
		return nil
	})
	if strings.Contains(logs.String(), "SECRET") {
		t.Fatalf("a log line carries the payload:\n%s", logs.String())
	}
	want := map[float64]struct{ id, typ string }{
		float64(seqs[0]): {"", "no_event_id"},
		float64(seqs[1]): {"refused-1", "sink_permanent"},
	}
	for _, l := range jsonLines(t, logs.String()) {
		if l["msg"] != "dlq: dead-lettered" {
			continue
		}
		w, ok := want[l["seq"].(float64)]
		if !ok {
			t.Fatalf("unexpected line %v", l)
		}
		if l["level"] != "WARN" || l["event_id"] != w.id || l["error_type"] != w.typ {
			t.Errorf("line %v: want WARN event_id %q error_type %q", l, w.id, w.typ)
		}
		if w.id == "" && !strings.Contains(fmt.Sprint(l["event_id_error"]), "missing") {
			t.Errorf("line %v: no event_id_error saying why", l)
		}
	}
}

// jsonLines decodes every JSON log line of s.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		out = append(out, m)
	}
	return out
}
