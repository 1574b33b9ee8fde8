//go:build unix

// The child's death by SIGKILL is read from its Unix wait status; on
// Windows a failpoint kill is TerminateProcess, with no signal to check.

package completion_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// failpointChildEnv carries the server URL to the child process of
// TestService_Failpoint_AfterKVWrite; it also marks the process as the child.
const failpointChildEnv = "LEAFLINE_RECEIPTS_TEST_CHILD_URL"

// failpointConfig is the Service configuration of the child and of the
// parent's second Service: the same consumer, a short AckWait.
func failpointConfig(js jetstream.JetStream) completion.ServiceConfig {
	cfg := completiontest.Config(js)
	cfg.AckWait, cfg.OpTimeout = 2*time.Second, time.Second
	cfg.InFlight = 1 // with batches: one worker, so that receipts share them
	return cfg
}

// TestService_Failpoint_AfterKVWrite runs a Service in a child process (this
// test binary again) with LEAFLINE_FAILPOINTS=l1.after_kv_write=kill@1 and
// checks that the point sits between the completion KV write and the ACK:
// the child dies by SIGKILL with the record written and the receipt unACKed,
// and a second Service absorbs the redelivery as a Duplicate.
func TestService_Failpoint_AfterKVWrite(t *testing.T) {
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
	r := receipttest.Receipt(receipttest.EventID(1))
	pa := completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID())

	killtest.RunUntilKilled(t, "TestService_Failpoint_AfterKVWrite", failpoint.L1AfterKVWrite, failpointChildEnv+"="+srv.ClientURL())

	// The KV write happened: the record holds the receipt, no duplicate yet.
	kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	st := kvstore.NewStore(kv)
	c, err := st.Get(ctx, r.EventID)
	if err != nil {
		t.Fatalf("record after the kill: %v", err)
	}
	if p := c.Processors[r.Processor]; p.Status != receipt.StatusProcessed || p.ReceiptID != r.ReceiptID || p.Duplicates != 0 {
		t.Fatalf("record after the kill: %+v", p)
	}
	// The ACK did not happen: the message is still pending at the consumer.
	cons, err := js.Consumer(ctx, "R1", completion.DefaultConsumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream >= pa.Sequence || info.NumAckPending != 1 {
		t.Fatalf("consumer after the kill: ack floor %d (receipt at %d), ack pending %d; want the receipt unACKed",
			info.AckFloor.Stream, pa.Sequence, info.NumAckPending)
	}

	// The redelivery is absorbed: counted, never applied twice.
	svc, err := completion.NewService(failpointConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	completiontest.Run(t, svc)
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if err := completiontest.StatsEqual(svc, record.Stats{Received: 1, Duplicates: 1}); err != nil {
			return err
		}
		return completiontest.ConsumerDrained(ctx, js, "R1", completion.DefaultConsumer)
	})
	c, err = st.Get(ctx, r.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Processors[r.Processor]; p.Status != receipt.StatusProcessed || p.ReceiptID != r.ReceiptID || p.Duplicates != 1 {
		t.Fatalf("record after the redelivery: %+v", p)
	}
}

// runFailpointChild runs a Service against the parent's server until the
// failpoint kills the process; returning at all is a failure.
func runFailpointChild(t *testing.T, url string) {
	js := jstest.ConnectURL(t, url)
	svc, err := completion.NewService(failpointConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = svc.Run(ctx)
	t.Fatal(fmt.Sprintf("the failpoint did not kill the process (Run returned %v, stats %+v)", err, svc.Stats()))
}
