package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leafline/leafline/edge/runner"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/topology"
)

// The runner's pipeline (fetch, commit, publish of consecutive batches
// overlapping) keeps every message's contract: many small batches, each
// message with exactly the success steps, every receipt published and
// marked before its ACK, and each batch's stages in order.
//
// With two publishers (as the box runs), the first one slowed down, the
// batches come back out of order and each is still finished on its own.
func TestContract_PipelineManyBatches(t *testing.T) {
	for _, v := range []struct {
		name    string
		tx, two bool
	}{{"plain_sink", false, false}, {"tx_sink", true, false}, {"tx_sink_two_publishers", true, true}} {
		tx := v.tx
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			f := newContractSite(t, contractOpts{txSink: tx, configure: func(c *topology.Config) {
				c.Delivery.BatchSize, c.Delivery.BacklogBatchSize = 4, 4
			}})
			if v.two {
				f.ro.Publishers = []outbox.Publisher{
					&slowPublisher{next: f.pub, delay: 30 * time.Millisecond},
					&receiptPublisher{js: jstest.ConnectURL(t, f.srv.ClientURL())},
				}
			}
			var mu sync.Mutex
			var bts []runner.BatchTimes
			f.ro.Hooks.OnBatch = func(bt runner.BatchTimes) { mu.Lock(); bts = append(bts, bt); mu.Unlock() }
			const n = 48
			seqs := f.publish(ids(n, "pl")...)
			f.start()
			want := at(1, stepsOK, "ack")
			for i, seq := range seqs {
				check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
					if got := stepNames(f.stepsOf(seq)); len(got) < len(want) {
						return fmt.Errorf("message %d: steps %v", i, got)
					}
					return nil
				})
			}
			for i, seq := range seqs {
				got := f.stepsOf(seq)
				if !slices.Equal(stepNames(got), want) {
					t.Errorf("message %d: steps %v, want %v", i, stepNames(got), want)
				}
				checkContractInvariants(t, fmt.Sprintf("message %d", i), got)
			}
			// Every batch is marked before it is ACKed: once all are ACKed,
			// nothing is pending.
			if st := f.outboxStats(); st.Pending != 0 || st.Published != n {
				t.Errorf("outbox %+v, want %d published", st, n)
			}
			if c := f.receiptCount(); c != n {
				t.Errorf("receipts stream holds %d, want %d", c, n)
			}
			check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
				if ci := f.consumerInfo(); ci.NumAckPending != 0 || ci.AckFloor.Stream != seqs[n-1] {
					return fmt.Errorf("ack pending %d floor %d", ci.NumAckPending, ci.AckFloor.Stream)
				}
				return nil
			})
			f.stop()
			mu.Lock()
			defer mu.Unlock()
			msgs := 0
			for i, bt := range bts {
				msgs += bt.Messages
				stages := []time.Time{bt.Fetch, bt.Fetched, bt.Commit, bt.Durable, bt.PubAck, bt.Marked, bt.Done}
				for j := 1; j < len(stages); j++ {
					if stages[j].IsZero() || stages[j].Before(stages[j-1]) {
						t.Errorf("batch %d: stage %d at %v, before stage %d at %v (or missing)", i, j, stages[j], j-1, stages[j-1])
					}
				}
			}
			if msgs != n {
				t.Errorf("batches carried %d messages, want %d", msgs, n)
			}
			if v.two {
				// Some batch got its PubAck before a batch fetched earlier.
				byFetch := slices.Clone(bts)
				slices.SortFunc(byFetch, func(a, b runner.BatchTimes) int { return a.Fetch.Compare(b.Fetch) })
				overtaken := 0
				for i := 1; i < len(byFetch); i++ {
					if byFetch[i].PubAck.Before(byFetch[i-1].PubAck) {
						overtaken++
					}
				}
				if overtaken == 0 {
					t.Errorf("two publishers, the first slowed: no batch overtook another; the test proves nothing")
				}
			}
			if len(bts) != n/4 {
				t.Errorf("%d batches, want %d", len(bts), n/4)
			}
		})
	}
}

// Under a backlog the fetch grows to backlog_batch_size after a full batch,
// and is back to batch_size once a fetch comes back short: a box that
// keeps up fetches (and ACKs) in small batches.
func TestContract_BacklogBatches(t *testing.T) {
	f := newContractSite(t, contractOpts{txSink: true, configure: func(c *topology.Config) {
		c.Delivery.BatchSize, c.Delivery.BacklogBatchSize = 4, 10
	}})
	var mu sync.Mutex
	var got [][2]int // asked, messages
	f.ro.Hooks.OnBatch = func(bt runner.BatchTimes) { mu.Lock(); got = append(got, [2]int{bt.Asked, bt.Messages}); mu.Unlock() }
	const n = 44 // 4, then 10 while full: 4 + 4×10
	f.publish(ids(n, "bl")...)
	f.start()
	published := func(want int) {
		check.For(t, 20*time.Second, 50*time.Millisecond, func() error {
			if st := f.outboxStats(); st.Published != want {
				return fmt.Errorf("published %d of %d", st.Published, want)
			}
			return nil
		})
	}
	published(n)
	// The backlog is gone (a fetch came back short): the next fetch asks
	// for batch_size again.
	f.publish(ids(1, "late")...)
	published(n + 1)
	f.stop()
	mu.Lock()
	defer mu.Unlock()
	want := [][2]int{{4, 4}, {10, 10}, {10, 10}, {10, 10}, {10, 10}, {4, 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("batches (asked, got) %v, want %v", got, want)
	}
}

// slowPublisher delays every call before delegating.
type slowPublisher struct {
	next  outbox.Publisher
	delay time.Duration
}

func (p *slowPublisher) Publish(ctx context.Context, recs []outbox.Record) error {
	time.Sleep(p.delay)
	return p.next.Publish(ctx, recs)
}

// interruptedPipelineEvents is how many events interruptedPipeline runs.
const interruptedPipelineEvents = 40

// interruptedPipeline runs a runner with batches of 4 over events
// "<prefix>-0" .. "<prefix>-39", calls interrupt once when the sink reaches
// "<prefix>-9" (the third batch), and returns the site, the events' stream
// sequences and what run returned (the test fails if run does not return
// within 30s).
func interruptedPipeline(t *testing.T, prefix string, interrupt func(f *contractSite)) (*contractSite, []uint64, error) {
	t.Helper()
	var f *contractSite
	var once sync.Once
	f = newContractSite(t, contractOpts{
		configure: func(c *topology.Config) { c.Delivery.BatchSize, c.Delivery.BacklogBatchSize = 4, 4 },
		hold: func(ev sink.Event) {
			if ev.ID == prefix+"-9" {
				once.Do(func() { interrupt(f) })
			}
		},
	})
	seqs := f.publish(ids(interruptedPipelineEvents, prefix)...)
	f.start()
	var err error
	select {
	case err = <-f.done:
	case <-time.After(30 * time.Second):
		t.Fatal("runner did not return after the interruption")
	}
	f.stopped = true
	return f, seqs, err
}

// Shutdown in the middle of a backlog: the batch being written finishes
// and is ACKed, the one already fetched is finished too, and nothing is
// fetched after the cancel — no message is left delivered but unacked.
func TestContract_PipelineShutdownFinishesWhatWasFetched(t *testing.T) {
	t.Parallel()
	f, seqs, err := interruptedPipeline(t, "sd", func(f *contractSite) { f.cancel() })
	if err != nil {
		t.Fatalf("run returned %v", err)
	}
	acked := 0
	for i, seq := range seqs {
		got := stepNames(f.stepsOf(seq))
		switch {
		case len(got) == 0:
		case slices.Equal(got, at(1, stepsOK, "ack")):
			acked++
		default:
			t.Errorf("message %d: steps %v: a fetched message must be finished", i, got)
		}
	}
	if acked != 12 {
		t.Errorf("%d messages processed, want the 3 batches fetched before the cancel (12)", acked)
	}
	// The runner's ACKs are not confirmed: the server may still be
	// processing the last ones (it was, once, on a loaded machine). A
	// message delivered and not ACKed would stay pending for AckWait.
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if ci := f.consumerInfo(); ci.NumAckPending != 0 || ci.NumPending != uint64(interruptedPipelineEvents-acked) {
			return fmt.Errorf("consumer ack pending %d pending %d: want 0 and %d (nothing fetched after the cancel)", ci.NumAckPending, ci.NumPending, interruptedPipelineEvents-acked)
		}
		return nil
	})
	if st := f.outboxStats(); st.Pending != 0 || st.Published != acked {
		t.Errorf("outbox %+v", st)
	}
}

// A fatal outbox error in the middle of a backlog: run returns it, and no
// message whose work was not finished — its commit, or the mark of its
// PubAck'ed receipts — is ACKed.
func TestContract_PipelineFatalLeavesInFlightUnacked(t *testing.T) {
	t.Parallel()
	f, seqs, err := interruptedPipeline(t, "ft", func(f *contractSite) { _ = f.ob.Close() })
	f.cancel()
	if !errors.Is(err, ErrFatal) {
		t.Fatalf("run returned %v, want ErrFatal", err)
	}
	acked := 0
	for i, seq := range seqs {
		got := stepNames(f.stepsOf(seq))
		if slices.Contains(got, "ack@1") {
			acked++
			if !slices.Equal(got, at(1, stepsOK, "ack")) {
				t.Errorf("message %d: ACKed with steps %v", i, got)
			}
		}
		if i >= 8 && i < 12 && slices.Contains(got, "ack@1") {
			t.Errorf("message %d of the batch whose commit failed was ACKed: %v", i, got)
		}
	}
	if acked > 8 {
		t.Errorf("%d ACKed, want at most the first two batches", acked)
	}
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		ci := f.consumerInfo()
		if ci.NumAckPending != 0 && int(ci.NumAckPending)+acked <= interruptedPipelineEvents && ci.AckFloor.Stream < seqs[8] {
			return nil
		}
		return fmt.Errorf("consumer %+v", ci)
	})
}
