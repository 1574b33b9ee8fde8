//go:build unix

package completion_test

import (
	"os"
	"testing"
	"time"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/failpoint"
	"github.com/leafline/leafline/internal/failpoint/killtest"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

// TestService_Failpoint_AfterBatchCommit kills a batched Service (one
// worker, so that the receipts share batches) in a child process after its
// first batch committed and before any ACK. A second Service absorbs every
// redelivery: each receipt is applied exactly once over both processes,
// and each one the child committed is counted once as a duplicate.
func TestService_Failpoint_AfterBatchCommit(t *testing.T) {
	if url := os.Getenv(failpointChildEnv); url != "" {
		runFailpointChild(t, url)
		return
	}
	if testing.Short() {
		t.Skip("runs a child process; skipped with -short")
	}
	srv, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	completiontest.CreateR1(t, js)
	const n = 20
	for i := 0; i < n; i++ {
		r := receipttest.Receipt(receipttest.EventID(i))
		completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID())
	}
	killtest.RunUntilKilled(t, "TestService_Failpoint_AfterBatchCommit", failpoint.L1AfterKVWrite, failpointChildEnv+"="+srv.ClientURL())
	kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	st := kvstore.NewStore(kv)
	committed := 0
	for i := 0; i < n; i++ {
		if _, err := st.Get(ctx, receipttest.EventID(i)); err == nil {
			committed++
		}
	}
	if committed == 0 {
		t.Fatal("no record after the kill; want the first batch committed")
	}

	svc, err := completion.NewService(failpointConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	completiontest.Run(t, svc)
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if err := completiontest.StatsEqual(svc, record.Stats{Received: n, Applied: uint64(n - committed), Duplicates: uint64(committed)}); err != nil {
			return err
		}
		return completiontest.ConsumerDrained(ctx, js, "R1", completion.DefaultConsumer)
	})
	for i := 0; i < n; i++ {
		c, err := st.Get(ctx, receipttest.EventID(i))
		if err != nil {
			t.Fatal(err)
		}
		if p := c.Processors["edge-1"]; p.Status != receipt.StatusProcessed || p.Duplicates > 1 {
			t.Fatalf("event %d after the redelivery: %+v", i, p)
		}
	}
	t.Logf("the child committed %d of %d receipts before it was killed", committed, n)
}
