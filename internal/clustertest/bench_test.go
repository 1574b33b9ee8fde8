//go:build unix

package clustertest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchEnv turns the measurement on and sets its event count.
const benchEnv = "LEAFLINE_CLUSTER_BENCH"

func benchEvents(t *testing.T) int {
	t.Helper()
	v := os.Getenv(benchEnv)
	if v == "" {
		t.Skipf("a measurement: set %s=EVENTS to run it", benchEnv)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", benchEnv, v)
	}
	return n
}

// TestBench_Cluster measures, in one run and on one machine: events/s end
// to end and the boxes' and servers' CPU per 1000 events with L1 embedded
// and with L1 on a three-node R3 cluster (the hub on its cluster in both);
// then the completion service's drain rate of a receipts backlog with one
// and with two l1 boxes. It prints rows; it asserts only completeness.
func TestBench_Cluster(t *testing.T) {
	n := benchEvents(t)
	for _, mode := range []struct {
		name     string
		embedded bool
	}{{"L1 embedded", true}, {"L1 on R3 cluster", false}} {
		lay := newLayout(t, layoutOptions{embeddedL1: mode.embedded})
		for _, b := range lay.boxes {
			b.start()
		}
		js := connect(t, lay.l1URL)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		cpu0, t0 := lay.cpuSeconds(), time.Now()
		publish(ctx, t, js, 0, n)
		waitComplete(ctx, t, lay.boxes["l1-a"].ops, int64(n))
		el, cpu := time.Since(t0), lay.cpuSeconds()-cpu0
		cancel()
		t.Logf("BENCH end-to-end %-17s events=%d  %.0f events/s  CPU %.2f s per 1k events", mode.name, n, float64(n)/el.Seconds(), cpu/float64(n)*1000)
		lay.stop()
	}
	lay := newLayout(t, layoutOptions{})
	js := connect(t, lay.l1URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, name := range []string{"hub-a", "edge1", "edge2"} {
		lay.boxes[name].start()
	}
	lay.boxes["l1-a"].start() // creates L1A and R1
	for round, instances := range [][]string{{"l1-a"}, {"l1-a", "l1-b"}} {
		for _, name := range instances {
			lay.boxes[name].stop()
		}
		from := round * n
		publish(ctx, t, js, from, from+n)
		// Both edges' receipts of the round are in R1 before any box drains them.
		waitR1(ctx, t, js, uint64(2*(from+n)))
		t0 := time.Now()
		for _, name := range instances {
			go lay.boxes[name].start()
		}
		waitComplete(ctx, t, lay.boxes["l1-a"].ops, int64(from+n))
		el := time.Since(t0)
		t.Logf("BENCH completion drain %d instance(s): %d receipts in %.1fs = %.0f receipts/s (box start included)", len(instances), 2*n, el.Seconds(), float64(2*n)/el.Seconds())
	}
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// waitR1 waits until R1 has stored last receipts in all (its last sequence).
func waitR1(ctx context.Context, t *testing.T, js jetstream.JetStream, last uint64) {
	t.Helper()
	for {
		if s, err := js.Stream(ctx, "R1"); err == nil && s.CachedInfo().State.LastSeq >= last {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("R1 does not reach sequence %d", last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// cpuSeconds sums the user and system CPU of the layout's running
// processes, read from /proc (0 where there is none).
func (lay *layout) cpuSeconds() float64 {
	var pids []int
	for _, b := range lay.boxes {
		b.mu.Lock()
		if b.cmd != nil {
			pids = append(pids, b.cmd.Process.Pid)
		}
		b.mu.Unlock()
	}
	for _, s := range append(lay.l1Nodes, lay.hubNodes...) {
		if p := s.Pid(); p != 0 {
			pids = append(pids, p)
		}
	}
	total := 0.0
	for _, p := range pids {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces): utime and
		// stime are the 12th and 13th, in clock ticks of 1/100 s.
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
		if len(f) > 12 {
			u, _ := strconv.ParseFloat(f[11], 64)
			s, _ := strconv.ParseFloat(f[12], 64)
			total += (u + s) / 100
		}
	}
	return total
}
