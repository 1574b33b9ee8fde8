//go:build unix

// The child's death by SIGKILL is read from its Unix wait status; on
// Windows a failpoint kill is TerminateProcess, with no signal to check.

package receipts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/failpoint"
)

// failpointChildEnv carries the server URL to the child process of
// TestService_Failpoint_AfterKVWrite; it also marks the process as the child.
const failpointChildEnv = "LEAFLINE_RECEIPTS_TEST_CHILD_URL"

// failpointConfig is the Service configuration of the child and of the
// parent's second Service: the same consumer, a short AckWait.
func failpointConfig(js jetstream.JetStream) ServiceConfig {
	cfg := testConfig(js)
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
	srv, js := startJS(t)
	ctx := testCtx(t)
	createR1(t, js)
	r := testReceipt(eventID(1))
	pa := publish(t, js, mustEncode(t, r), r.MsgID())

	runUntilKilled(t, "TestService_Failpoint_AfterKVWrite", failpoint.L1AfterKVWrite, failpointChildEnv+"="+srv.ClientURL())

	// The KV write happened: the record holds the receipt, no duplicate yet.
	kv, err := js.KeyValue(ctx, DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(kv)
	c, err := st.Get(ctx, r.EventID)
	if err != nil {
		t.Fatalf("record after the kill: %v", err)
	}
	if p := c.Processors[r.Processor]; p.Status != StatusProcessed || p.ReceiptID != r.ReceiptID || p.Duplicates != 0 {
		t.Fatalf("record after the kill: %+v", p)
	}
	// The ACK did not happen: the message is still pending at the consumer.
	cons, err := js.Consumer(ctx, "R1", DefaultConsumer)
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
	svc, err := NewService(failpointConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	startService(t, svc)
	check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
		if err := statsEqual(svc, Stats{Received: 1, Duplicates: 1}); err != nil {
			return err
		}
		return consumerDrained(ctx, js, "R1", DefaultConsumer)
	})
	c, err = st.Get(ctx, r.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Processors[r.Processor]; p.Status != StatusProcessed || p.ReceiptID != r.ReceiptID || p.Duplicates != 1 {
		t.Fatalf("record after the redelivery: %+v", p)
	}
}

// runFailpointChild runs a Service against the parent's server until the
// failpoint kills the process; returning at all is a failure.
func runFailpointChild(t *testing.T, url string) {
	js := connectURL(t, url)
	svc, err := NewService(failpointConfig(js))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = svc.Run(ctx)
	t.Fatal(fmt.Sprintf("the failpoint did not kill the process (Run returned %v, stats %+v)", err, svc.Stats()))
}

// runUntilKilled runs the test named test again in a child process with
// env and the failpoint point set to kill@1, and checks that the child
// died by SIGKILL at that point.
func runUntilKilled(t *testing.T, test, point string, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), env...), failpoint.EnvVar+"="+point+"=kill@1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want death by SIGKILL\n%s", err, out.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want death by SIGKILL\n%s", err, out.String())
	}
	if want := "failpoint " + point + ": SIGKILL"; !strings.Contains(out.String(), want) {
		t.Fatalf("child output lacks %q:\n%s", want, out.String())
	}
}

// connectURL connects a child process to the parent's server.
func connectURL(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
