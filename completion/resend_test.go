package completion_test

import (
	"testing"
	"time"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/topology"
)

// Resend sends a released edge its pending events up to the release, to
// it alone; it waits, without ending, while they are inside the origin
// stream's duplicate window; and a later release sends again only the
// copies it released, not those the hub still holds.
func TestResend_SendsOnlyWhatTheReleaseReleased(t *testing.T) {
	window := time.Second
	svc, js := completiontest.StartTracking(t, func(c *completion.ServiceConfig) {
		c.OriginDuplicates = window
		c.Address = topology.AddressedSubject
	})
	ctx := jstest.Ctx(t)
	s, err := js.Stream(ctx, "L1A")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Subjects = append(cfg.Subjects, topology.AddressFilter("edge-1"))
	cfg.Duplicates, cfg.AllowAtomicPublish = window, true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	ids := []string{"r1", "r2", "r3"}
	for _, id := range ids {
		completiontest.PublishEvent(t, js, "events.b", id)
	}
	completiontest.PublishEvent(t, js, "events.b", "done")
	for _, id := range append(ids, "done") {
		completiontest.WaitStatus(t, svc, id, record.EventPending)
	}
	completiontest.SendReceipt(t, js, "done", "edge-1", receipt.StatusProcessed)
	completiontest.WaitStatus(t, svc, "done", record.EventComplete)
	released := uint64(len(ids)) // the hub released r1..r3

	// Inside the window the stream would drop a copy: nothing is sent,
	// and the round does not end the resend.
	res, err := svc.Resend(ctx, "edge-1", released, "", 1<<20)
	if err != nil || res.Done || res.Events != 0 {
		t.Fatalf("a round inside the duplicate window: %+v, %v; want nothing sent and not done", res, err)
	}
	time.Sleep(window + 100*time.Millisecond)
	res, err = svc.Resend(ctx, "edge-1", released, res.Next, 1<<20)
	if err != nil || !res.Done || res.Events != len(ids) {
		t.Fatalf("a round past the window: %+v, %v; want all %d sent and done", res, err, len(ids))
	}
	// The events have no payload: what a copy takes in the hub's stream,
	// which its budget counts, is its subject and headers.
	if min := int64(len(ids) * len(topology.AddressedSubject("edge-1", "events.b"))); res.Bytes < min {
		t.Fatalf("%d copies counted as %d bytes, want at least their subjects' %d", res.Events, res.Bytes, min)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, copies := info.State.LastSeq-uint64(len(ids))+1, info.State.LastSeq
	for seq := first; seq <= copies; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if want := topology.AddressedSubject("edge-1", "events.b"); m.Subject != want || m.Header.Get(receipt.RedriveHeader) != completion.ResendMark {
			t.Fatalf("copy at %d: subject %q, %s %q; want %q, %q", seq, m.Subject, receipt.RedriveHeader, m.Header.Get(receipt.RedriveHeader), want, completion.ResendMark)
		}
	}

	time.Sleep(window + 100*time.Millisecond)
	// A new release below the copies: the hub still holds them.
	res, err = svc.Resend(ctx, "edge-1", first-1, "", 1<<20)
	if err != nil || !res.Done || res.Events != 0 {
		t.Fatalf("a release that did not reach the copies: %+v, %v; want nothing sent again", res, err)
	}
	// A release through the copies: they are sent once more (a release
	// into them counts as one through them: the service remembers where
	// a batch of copies starts).
	res, err = svc.Resend(ctx, "edge-1", copies, "", 1<<20)
	if err != nil || !res.Done || res.Events != len(ids) {
		t.Fatalf("a release through the copies: %+v, %v; want all %d sent again", res, err, len(ids))
	}
}
