package jsplan

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// memReleases keeps releases in memory, and can refuse to record.
type memReleases struct {
	mu     sync.Mutex
	by     map[string]Release
	refuse error
}

func (m *memReleases) Released(site string) Release {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.by[site]
}

func (m *memReleases) Release(_ context.Context, r Release) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refuse != nil {
		return m.refuse
	}
	if m.by == nil {
		m.by = map[string]Release{}
	}
	m.by[r.Site] = r
	return nil
}

// originHeader is the upstream sequence the test's messages carry.
const originHeader = "Origin"

func originOf(h nats.Header) (uint64, bool) {
	n, err := strconv.ParseUint(h.Get(originHeader), 10, 64)
	return n, err == nil
}

// budgetStream publishes n messages of size bytes on S, each with its
// upstream sequence (1000 + its own), and returns two consumers: "near",
// which ACKs everything, and "far", which takes nothing (an edge parked).
func budgetStream(ctx context.Context, t *testing.T, n, size int) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	js, s := trimmedStream(ctx, t)
	for i := 1; i <= n; i++ {
		m := nats.NewMsg("s.x")
		m.Data = make([]byte, size)
		m.Header.Set(originHeader, strconv.Itoa(1000+i))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"near", "far"} {
		if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckAllPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	near, _ := s.Consumer(ctx, "near")
	takeN(t, near, n, func(i int, m jetstream.Msg) error {
		if i == n-1 {
			return m.DoubleAck(ctx)
		}
		return nil
	})
	return js, s
}

// A site past its byte budget is released down to half of it, recorded
// before anything is deleted; the other site's messages are trimmed as
// usual, and the stream keeps what the released site's budget holds.
func TestTrim_ReleasesASiteOverItsBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, s := budgetStream(ctx, t, 100, 1000)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mean := info.State.Bytes / 100
	rel := &memReleases{}
	p := TrimPlan{Stream: "S", Consumers: []string{"near", "far"}, Origin: originOf, Releases: rel,
		Budgets: []Budget{{Site: "edge1", Consumers: []string{"near"}, MaxBytes: 1 << 30},
			{Site: "edge2", Consumers: []string{"far"}, MaxBytes: int64(40 * mean)}}}
	n, backlogs, err := TrimStreamAt(ctx, js, p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r := rel.Released("edge2")
	// Half of the budget is 20 messages: released through 80, whose
	// upstream sequence is 1080.
	if r.Through != 80 || r.Origin != 1080 || r.Msgs != 80 {
		t.Fatalf("release %+v, want through 80, origin 1080, 80 messages", r)
	}
	if n != 80 {
		t.Fatalf("trimmed %d, want 80", n)
	}
	if len(backlogs) != 2 || backlogs[1].Msgs != 20 || backlogs[0].Msgs != 0 || backlogs[1].Released != r {
		t.Fatalf("backlogs %+v", backlogs)
	}
	// A second pass releases nothing more: the site is within budget.
	if _, _, err := TrimStreamAt(ctx, js, p, time.Now()); err != nil {
		t.Fatal(err)
	}
	if again := rel.Released("edge2"); again != r {
		t.Fatalf("released again: %+v", again)
	}
}

// A release that cannot be recorded deletes nothing past the site's
// floor; a plan without Releases only measures.
func TestTrim_NoReleaseWithoutItsRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, s := budgetStream(ctx, t, 50, 1000)
	budgets := []Budget{{Site: "edge2", Consumers: []string{"far"}, MaxBytes: 1000}, {Site: "edge1", Consumers: []string{"near"}, MaxBytes: 1 << 30}}
	refusing := &memReleases{refuse: context.DeadlineExceeded}
	for _, rel := range []Releases{refusing, nil} {
		p := TrimPlan{Stream: "S", Consumers: []string{"near", "far"}, Origin: originOf, Releases: rel, Budgets: budgets}
		n, backlogs, err := TrimStreamAt(ctx, js, p, time.Now())
		if rel != nil && err == nil {
			t.Fatal("a release that was not recorded did not fail the pass")
		}
		if info, err := s.Info(ctx); err != nil || n != 0 || info.State.FirstSeq != 1 {
			t.Fatalf("trimmed %d without a recorded release (%v)", n, err)
		}
		if rel == nil && (len(backlogs) != 2 || !backlogs[0].Over(time.Now()) || backlogs[0].Msgs != 50) {
			t.Fatalf("backlogs %+v: want edge2 over its budget with 50 messages", backlogs)
		}
	}
}

// A site whose oldest held message is past its age bound is released
// down to half of it.
func TestTrim_ReleasesASiteOverItsAge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := budgetStream(ctx, t, 10, 10)
	rel := &memReleases{}
	p := TrimPlan{Stream: "S", Consumers: []string{"near", "far"}, Origin: originOf, Releases: rel,
		Budgets: []Budget{{Site: "edge2", Consumers: []string{"far"}, MaxBytes: 1 << 30, MaxAge: time.Hour}}}
	// As of 3 hours later every message is past the bound, and past half of it.
	if _, _, err := TrimStreamAt(ctx, js, p, time.Now().Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r := rel.Released("edge2"); r.Through != 10 || r.Origin != 1010 {
		t.Fatalf("release %+v, want through 10", r)
	}
}
