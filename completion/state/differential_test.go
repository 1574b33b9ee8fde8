package state

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
)

// history is a recorded sequence of steps: each one batch given to a State.
type history []step

type step struct {
	receipts []record.BatchItem
	origins  []record.Origin
	now      time.Time
	dropHeld bool // expire every held event (HeldEvents, then DropHeld)
	instance int  // which of two instances applies it
}

var diffSites = []string{"edge-1", "edge-2", "edge-3"}

// recordHistory makes a history over n events with every case the
// completion state distinguishes: receipts before their origin (held),
// after it, repeated (duplicates), with another status (conflicts), dead
// letters, processors the event was not routed to, origins delivered twice
// and reused with another payload, held events expired, and two instances
// taking turns.
func recordHistory(seed uint64, n int, base time.Time) history {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	type ev struct {
		id       string
		expected []string
		origin   record.Origin
	}
	evs := make([]ev, n)
	for i := range evs {
		var exp []string
		for _, s := range diffSites {
			if rng.IntN(3) > 0 {
				exp = append(exp, s)
			}
		}
		id := fmt.Sprintf("evt-%04d-%x", i, rng.Uint32())
		// Some were published long ago (overdue), some lately; none near
		// the overdue threshold (5m), so that both states, asked a moment
		// apart, see the same overdue events.
		pub := base.Add(-time.Duration(rng.IntN(200)) * time.Second)
		if rng.IntN(2) == 0 {
			pub = base.Add(-time.Duration(420+rng.IntN(300)) * time.Second)
		}
		evs[i] = ev{id: id, expected: exp, origin: record.Origin{
			EventID: id, Stream: "L1A", Subject: "events.x", Seq: uint64(i + 1), PublishedAt: pub,
			Expected: exp, Digest: fmt.Sprintf("%064x", i),
		}}
	}
	rcpt := func(e ev, site string, status receipt.Status, at time.Time) record.BatchItem {
		r := receipt.New(e.id, "L1A", site, site, status, at.Add(-time.Second))
		return record.BatchItem{Receipt: r, ReceivedAt: at}
	}
	var ops []any // BatchItem or Origin
	for i, e := range evs {
		noOrigin := i%17 == 5 // never published: its receipts stay held
		if !noOrigin && rng.IntN(4) != 0 {
			ops = append(ops, e.origin)
		}
		for _, site := range diffSites {
			routed := slices.Contains(e.expected, site)
			if !routed && rng.IntN(6) != 0 {
				continue // an unexpected processor, now and then
			}
			statuses := []receipt.Status{receipt.StatusProcessed, receipt.StatusDeadLettered, receipt.StatusExpired}
			status := receipt.StatusProcessed
			switch rng.IntN(8) {
			case 0:
				status = receipt.StatusDeadLettered
			case 1:
				status = receipt.StatusExpired
			}
			if rng.IntN(5) == 0 {
				continue // not reported yet: pending
			}
			it := rcpt(e, site, status, base.Add(time.Duration(i)*time.Millisecond))
			ops = append(ops, it)
			switch rng.IntN(6) {
			case 0: // the same receipt again (redelivery)
				ops = append(ops, it)
			case 1: // another status: a conflict
				other := statuses[(slices.Index(statuses, status)+1+rng.IntN(2))%len(statuses)]
				ops = append(ops, rcpt(e, site, other, base.Add(time.Duration(i)*time.Millisecond+time.Microsecond)))
			}
		}
		if !noOrigin {
			o := e.origin
			switch rng.IntN(8) {
			case 0: // delivered again
				ops = append(ops, o)
			case 1: // event_id reused with another payload
				o.Seq, o.Digest = o.Seq+100000, fmt.Sprintf("%064x", i+1)
				ops = append(ops, o)
			}
			ops = append(ops, e.origin) // late origins (after their receipts)
		}
	}
	// Shuffle locally: reorder within windows, so receipts often come
	// before their origin and batches mix events.
	for i := range ops {
		j := min(len(ops)-1, i+rng.IntN(8))
		ops[i], ops[j] = ops[j], ops[i]
	}
	var h history
	for len(ops) > 0 {
		k := min(len(ops), 1+rng.IntN(40))
		st := step{now: base, instance: rng.IntN(2)}
		for _, op := range ops[:k] {
			switch op := op.(type) {
			case record.BatchItem:
				st.receipts = append(st.receipts, op)
			case record.Origin:
				st.origins = append(st.origins, op)
			}
		}
		ops = ops[k:]
		h = append(h, st)
		if rng.IntN(10) == 0 {
			h = append(h, step{dropHeld: true, instance: rng.IntN(2)})
		}
	}
	return append(h, step{dropHeld: true})
}

// apply runs one step on st and returns what it answered, as text.
func (st step) apply(t *testing.T, ctx context.Context, s record.State) []string {
	t.Helper()
	var out []string
	errClass := func(err error) string {
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, record.ErrNotExpected):
			return "not_expected"
		case errors.Is(err, receipt.ErrQuarantine):
			return "quarantine"
		}
		t.Fatalf("transient error in a differential run: %v", err)
		return ""
	}
	if len(st.receipts) > 0 {
		for i, r := range s.ApplyBatch(ctx, st.receipts) {
			out = append(out, fmt.Sprintf("receipt %d %s/%s: %v seq=%d %s", i, st.receipts[i].Receipt.EventID, st.receipts[i].Receipt.Processor, r.Outcome, r.OriginSeq, errClass(r.Err)))
		}
	}
	if len(st.origins) > 0 {
		for i, r := range s.ApplyOriginBatch(ctx, st.origins, st.now) {
			out = append(out, fmt.Sprintf("origin %d %s: %v %v %v %s", i, st.origins[i].EventID, r.Outcome, r.Held.Released, r.Held.Refused, errClass(r.Err)))
		}
	}
	if st.dropHeld {
		held, err := s.HeldEvents(ctx, 10000)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(held, func(a, b record.Completion) int { return strings.Compare(a.EventID, b.EventID) })
		for i := range held {
			ok, err := s.DropHeld(ctx, &held[i])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("drop %s: %v", held[i].EventID, ok))
		}
	}
	return out
}

// answers is everything a State answers about the events of h.
func answers(t *testing.T, ctx context.Context, s record.State, ids []string) []string {
	t.Helper()
	var out []string
	for _, id := range ids {
		c, err := s.Get(ctx, id)
		switch {
		case errors.Is(err, record.ErrNotFound):
			out = append(out, "get "+id+": not found")
		case err != nil:
			t.Fatal(err)
		default:
			c.UpdatedAt = c.UpdatedAt.UTC()
			out = append(out, fmt.Sprintf("get %s: %+v", id, c))
		}
	}
	for _, status := range []record.ListStatus{record.ListPending, record.ListOverdue, record.ListDeadLettered, record.ListExpired, record.ListConflict} {
		for _, site := range append([]string{""}, diffSites...) {
			var got []string
			q := record.ListQuery{Status: status, Site: site, Limit: 7}
			for page := 0; ; page++ {
				if page > 1000 {
					t.Fatalf("list %s %s: more than 1000 pages", status, site)
				}
				items, next, err := s.List(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range items {
					got = append(got, c.EventID)
				}
				if next == "" {
					break
				}
				q.After = next
			}
			slices.Sort(got)
			out = append(out, fmt.Sprintf("list %s %q: %v", status, site, got))
		}
	}
	sum, err := s.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Truncated {
		t.Fatal("summary truncated in a small run")
	}
	sum.GeneratedAt, sum.Instance = time.Time{}, nil
	for _, p := range append([]*record.PendingAge{sum.OldestPending}, sitesOldest(sum)...) {
		if p != nil {
			p.AgeSeconds = 0 // depends on when it was asked
		}
	}
	deref := func(p *record.PendingAge) string {
		if p == nil {
			return "none"
		}
		return fmt.Sprintf("%+v", *p)
	}
	out = append(out, "oldest "+deref(sum.OldestPending))
	sum.OldestPending = nil
	for i, site := range sum.Sites {
		out = append(out, fmt.Sprintf("site %s oldest %s", site.Site, deref(site.OldestPending)))
		sum.Sites[i].OldestPending = nil
	}
	out = append(out, fmt.Sprintf("summary %+v", sum))
	return out
}

func sitesOldest(sum record.Summary) []*record.PendingAge {
	var out []*record.PendingAge
	for _, s := range sum.Sites {
		out = append(out, s.OldestPending)
	}
	return out
}

// TestDifferential_SameAnswersAsKVStore feeds one recorded history to the
// KV Store (two instances sharing the buckets) and to this package's State
// (two instances sharing the log), and compares every answer after every
// step: outcomes, refusals, held releases and expiries, records, every
// list (pending, overdue, dead-lettered, conflict, for the event and per
// site, paged) and the summary.
func TestDifferential_SameAnswersAsKVStore(t *testing.T) {
	srv := jstest.Start(t, jstest.Options{})
	js := jstest.Connect(t, srv)
	ctx := context.Background()
	base := time.Now().UTC()
	h := recordHistory(1, 300, base)

	var old [2]record.State
	for i := range old {
		st, err := kvstore.OpenStore(ctx, kvstore.StoreConfig{JS: js, Bucket: "diff_kv", Create: true, Sites: diffSites, HoldUntilOrigin: true})
		if err != nil {
			t.Fatal(err)
		}
		old[i] = st
	}
	dir := t.TempDir()
	var neu [2]record.State
	for i := range neu {
		st, err := Open(ctx, Config{JS: js, Path: filepath.Join(dir, fmt.Sprintf("box%d.db", i)), ImportBucket: "-",
			Sites: diffSites, HoldUntilOrigin: true, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if err := st.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		neu[i] = st
	}
	idSet := map[string]bool{}
	for _, st := range h {
		for _, it := range st.receipts {
			idSet[it.Receipt.EventID] = true
		}
		for _, o := range st.origins {
			idSet[o.EventID] = true
		}
	}
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range idSet {
			if !yield(id) {
				return
			}
		}
	})
	steps := 0
	var seen record.Summary // the most of each count seen at a check
	for i, st := range h {
		a := st.apply(t, ctx, old[st.instance])
		b := st.apply(t, ctx, neu[st.instance])
		if d := diff(a, b); d != "" {
			t.Fatalf("step %d (instance %d): answers differ:\n%s", i, st.instance, d)
		}
		if i%25 == 0 || i == len(h)-1 {
			// The other instance must have caught up: it answers the same.
			other := 1 - st.instance
			waitCaughtUp(t, ctx, neu[other].(*State), neu[st.instance].(*State))
			if sum, err := neu[0].Summary(ctx); err == nil {
				seen.Pending, seen.Overdue = max(seen.Pending, sum.Pending), max(seen.Overdue, sum.Overdue)
				seen.DeadLettered, seen.Conflict = max(seen.DeadLettered, sum.DeadLettered), max(seen.Conflict, sum.Conflict)
				seen.PendingOriginUnknown = max(seen.PendingOriginUnknown, sum.PendingOriginUnknown)
			}
			for _, pair := range [][2]record.State{{old[st.instance], neu[st.instance]}, {old[other], neu[other]}} {
				if d := diff(answers(t, ctx, pair[0], ids), answers(t, ctx, pair[1], ids)); d != "" {
					t.Fatalf("after step %d: queries differ:\n%s", i, d)
				}
			}
		}
		steps++
	}
	t.Logf("%d steps over %d events; at most %d pending, %d overdue, %d dead-lettered, %d conflicts, %d origin unknown at once",
		steps, len(ids), seen.Pending, seen.Overdue, seen.DeadLettered, seen.Conflict, seen.PendingOriginUnknown)
	if seen.Pending == 0 || seen.Overdue == 0 || seen.DeadLettered == 0 || seen.Conflict == 0 || seen.PendingOriginUnknown == 0 {
		t.Fatalf("the history misses a case: %+v", seen)
	}
}

// waitCaughtUp waits until a has folded the log as far as b.
func waitCaughtUp(t *testing.T, ctx context.Context, a, b *State) {
	t.Helper()
	check.For(t, 10*time.Second, 5*time.Millisecond, func() error {
		if x, y := a.Stats().Applied, b.Stats().Applied; x < y {
			return fmt.Errorf("instance stays at log entry %d, the other at %d", x, y)
		}
		return nil
	})
}

func diff(a, b []string) string {
	var out []string
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			out = append(out, "  kv:    "+x, "  local: "+y)
		}
		if len(out) > 12 {
			break
		}
	}
	return strings.Join(out, "\n")
}
