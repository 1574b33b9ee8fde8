package systest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"

	"github.com/leafline/leafline/topology"
)

// TestSystem_Cleanup runs a whole system with completion.cleanup on: every
// done event's origin message leaves L1A, each with an audit record citing
// both edges' signed receipts, and the status API points at the record.
func TestSystem_Cleanup(t *testing.T) {
	ls := testSystem(t, Options{Edges: 2, Configure: func(c *topology.Config) {
		c.Completion.Cleanup = topology.CleanupConfig{Grace: topology.Duration(time.Millisecond),
			Interval: topology.Duration(100 * time.Millisecond)}
	}}, nil)
	l1 := ls.App("l1")
	js := jstest.ConnectURL(t, l1.ClientURL())
	ids := publishN(t, js, "cln", 50)
	waitCompleted(t, ls, ids, "edge1", "edge2")
	ctx := context.Background()
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		st, err := js.Stream(ctx, ls.Topology.Events.OriginStream)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("origin stream holds %d messages", info.State.Msgs)
		}
		return nil
	})
	if s := cleanerOf(l1).Stats(); s.Deleted != uint64(len(ids)) || s.Mismatches != 0 || s.BytesFreed == 0 {
		t.Fatalf("cleanup stats: %+v", s)
	}
	mfs, err := l1.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			seen[mf.GetName()] += m.GetCounter().GetValue()
		}
	}
	if seen["leafline_cleanup_deleted_total"] != float64(len(ids)) || seen["leafline_cleanup_bytes_freed_total"] == 0 {
		t.Fatalf("cleanup metrics: deleted %v, bytes %v", seen["leafline_cleanup_deleted_total"], seen["leafline_cleanup_bytes_freed_total"])
	}
	ents, err := cleanerOf(l1).Audit(ctx, ids[7])
	if err != nil || len(ents) != 1 {
		t.Fatalf("audit of %q: %v %+v", ids[7], err, ents)
	}
	for _, r := range ents[0].Record.Receipts {
		if r.Status != receipt.StatusProcessed || !r.Verified || r.ReceiptID == "" {
			t.Fatalf("audit receipt: %+v", r)
		}
	}
	c, err := leafline.Completions(l1).Get(ctx, ids[7])
	if err != nil || c.Cleaned == nil || c.Cleaned.Seq != ents[0].Ref.Seq {
		t.Fatalf("status: %v %+v", err, c.Cleaned)
	}
}
