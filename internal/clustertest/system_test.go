//go:build unix

package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/outbox"
	"github.com/leafline/leafline/status"
)

// eventsEnv sets the system test's event count (default defaultEvents);
// the long run uses 20000 (go test -timeout 40m).
const eventsEnv = "LEAFLINE_CLUSTER_EVENTS"

const defaultEvents = 1000

func eventCount(t *testing.T) int {
	t.Helper()
	v := os.Getenv(eventsEnv)
	if v == "" {
		return defaultEvents
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 4 {
		t.Fatalf("%s=%q: want a number of at least 4", eventsEnv, v)
	}
	return n
}

// TestSystem_Clusters_Failover publishes events at L1 while one L1 node,
// one hub node and one l1 box are SIGKILLed and started again, and
// requires that every event ends complete for both edges exactly once
// (one completion record per event, one outbox record per event at each
// edge), that nothing is left pending, and that both l1 boxes answer the
// same summary.
func TestSystem_Clusters_Failover(t *testing.T) {
	lay := newLayout(t, layoutOptions{})
	n := eventCount(t)
	for _, name := range []string{"l1-a", "l1-b", "hub-a", "edge1", "edge2"} {
		lay.boxes[name].start()
	}
	nc, err := nats.Connect(lay.l1URL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A PubAck lost with a killed node fails its future, and the window is published again.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The bound grows with the events: a loaded machine takes 20000 at
	// some tens of events/s end to end under fsync-always on every hop.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+time.Duration(n)*50*time.Millisecond)
	defer cancel()
	quarter := n / 4
	faults := []struct {
		what string
		do   func()
	}{
		{"SIGKILL L1 node l1-n2", func() { lay.l1Nodes[1].Kill() }},
		{"restart l1-n2; SIGKILL hub node hub-n1", func() {
			mustStart(t, lay.l1Nodes[1])
			lay.hubNodes[0].Kill()
		}},
		{"restart hub-n1; SIGKILL box l1-b", func() {
			mustStart(t, lay.hubNodes[0])
			lay.boxes["l1-b"].kill()
		}},
		{"restart l1-b", func() { lay.boxes["l1-b"].start() }},
	}
	for i, f := range faults {
		publish(ctx, t, js, i*quarter, min((i+1)*quarter, n))
		if i < 3 {
			waitComplete(ctx, t, lay.boxes["l1-a"].ops, int64((i+1)*quarter)/2)
		}
		t.Logf("%s", f.what)
		f.do()
	}
	if rest := 4 * quarter; rest < n {
		publish(ctx, t, js, rest, n)
	}
	sum := waitComplete(ctx, t, lay.boxes["l1-a"].ops, int64(n))
	if sum.Events != int64(n) || sum.Pending != 0 || sum.Conflict != 0 || sum.DeadLettered != 0 {
		t.Fatalf("summary: %d events, %d pending, %d conflict, %d dead-lettered; want %d complete, nothing else", sum.Events, sum.Pending, sum.Conflict, sum.DeadLettered, n)
	}
	// Each box folds the shared log into its own file: l1-b answers the
	// same once it has folded as far as l1-a (moments later).
	var other record.Summary
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		if other = summary(t, lay.boxes["l1-b"].ops); !sameCounts(sum, other) {
			return fmt.Errorf("l1-a and l1-b answer differently:\n%+v\n%+v", sum, other)
		}
		return nil
	})
	for _, id := range []string{eventID(0), eventID(n / 2), eventID(n - 1)} {
		a, b := eventStatus(t, lay.boxes["l1-a"].ops, id), eventStatus(t, lay.boxes["l1-b"].ops, id)
		if a != b {
			t.Fatalf("event %s: l1-a says %s, l1-b says %s", id, a, b)
		}
	}
	// Exactly once at each edge: one outbox record per event, whatever the
	// redeliveries the faults caused.
	for _, e := range []string{"edge1", "edge2"} {
		lay.boxes[e].stop()
		ob, err := outbox.Open(filepath.Join(lay.dir, e, "outbox.db"), outbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := ob.Stats()
		ob.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending+st.Published != n || st.Pending != 0 {
			t.Fatalf("%s outbox: %d published, %d pending; want %d published", e, st.Published, st.Pending, n)
		}
	}
}

func mustStart(t *testing.T, s interface{ Start(time.Duration) error }) {
	t.Helper()
	if err := s.Start(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func eventID(i int) string { return fmt.Sprintf("ev-%06d", i) }

// publish publishes events [from, to) on L1A, retrying each until its
// PubAck: a retried event keeps its Nats-Msg-Id and is stored once.
func publish(ctx context.Context, t *testing.T, js jetstream.JetStream, from, to int) {
	t.Helper()
	const window = 256
	for lo := from; lo < to; lo += window {
		hi := min(lo+window, to)
		for {
			var futs []jetstream.PubAckFuture
			for i := lo; i < hi; i++ {
				msg := &nats.Msg{Subject: "events.site." + strconv.Itoa(i%7), Data: []byte(`{"n":` + strconv.Itoa(i) + `}`), Header: nats.Header{}}
				msg.Header.Set(nats.MsgIdHdr, eventID(i))
				f, err := js.PublishMsgAsync(msg)
				if err != nil {
					break
				}
				futs = append(futs, f)
			}
			ok := len(futs) == hi-lo
			for _, f := range futs {
				select {
				case <-f.Ok():
				case <-f.Err():
					ok = false
				case <-ctx.Done():
					t.Fatal("publish: timed out")
				}
			}
			if ok {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func summary(t *testing.T, ops string) record.Summary {
	t.Helper()
	var s record.Summary
	getJSON(t, "http://"+ops+"/v1/summary", &s)
	return s
}

func trySummary(ops string) (record.Summary, bool) {
	var s record.Summary
	resp, err := http.Get("http://" + ops + "/v1/summary")
	if err != nil {
		return s, false
	}
	defer resp.Body.Close()
	return s, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&s) == nil
}

// waitComplete waits until the box at ops reports at least want complete events.
func waitComplete(ctx context.Context, t *testing.T, ops string, want int64) record.Summary {
	t.Helper()
	var last record.Summary
	for {
		if s, ok := trySummary(ops); ok {
			last = s
			if s.Complete >= want {
				return s
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not %d complete events in time; last summary: %+v", want, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func sameCounts(a, b record.Summary) bool {
	return a.Events == b.Events && a.Pending == b.Pending && a.Complete == b.Complete &&
		a.DeadLettered == b.DeadLettered && a.Conflict == b.Conflict && a.Overdue == b.Overdue
}

func eventStatus(t *testing.T, ops, id string) string {
	t.Helper()
	var v map[string]any
	getJSON(t, "http://"+ops+status.EventPath(id), &v)
	delete(v, "generated_at")
	b, _ := json.Marshal(v)
	return string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
