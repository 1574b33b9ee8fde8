package completion_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/logx/logxtest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

// publishOn publishes r on subject, as a link would deliver it. Forged
// and genuine receipts may make the same assertion: the id is the
// receipt's own, so that R1's duplicate window keeps them all.
func publishOn(t *testing.T, js jetstream.JetStream, subject string, r receipt.Receipt) {
	t.Helper()
	if _, err := js.Publish(jstest.Ctx(t), subject, receipttest.Encode(t, r), jetstream.WithMsgID(r.ReceiptID)); err != nil {
		t.Fatalf("publish receipt: %v", err)
	}
}

// quarantineReasons returns the reasons of the quarantine records.
func quarantineReasons(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var out []string
	for _, rec := range quarantineRecords(t, js) {
		out = append(out, rec.Reason)
	}
	return out
}

// TestService_Binding: a receipt speaks only for the site that sent it. A
// receipt whose body disagrees with its subject, that speaks for another
// processor than its site, or that comes from a processor the event was
// not routed to is quarantined with its reason, counted per reason and
// logged, and changes nothing; a receipt for an event L1 has not seen is
// held (origin_unknown, counting for nothing) until the origin arrives,
// which releases it if the event was routed to its processor and sets it
// aside otherwise. The genuine receipts are applied all along.
func TestService_Binding(t *testing.T) {
	logs := &logxtest.Buffer{}
	svc, js := completiontest.StartTracking(t, func(c *completion.ServiceConfig) {
		c.SubjectPrefix = "leafline.receipts"
		c.ProcessorIsSite = true
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	ctx := jstest.Ctx(t)
	subj := func(site string, st receipt.Status) string { return "leafline.receipts." + site + "." + string(st) }

	completiontest.PublishEvent(t, js, "events.a.x", "both") // edge-1 and edge-2
	completiontest.PublishEvent(t, js, "events.b", "one")    // edge-1 only
	completiontest.WaitStatus(t, svc, "both", record.EventPending)
	completiontest.WaitStatus(t, svc, "one", record.EventPending)

	// The body names edge-2, the subject (the link) edge-1.
	publishOn(t, js, subj("edge-1", receipt.StatusProcessed), receipt.New("both", "L1A", "edge-2", "edge-2", receipt.StatusProcessed, time.Now()))
	// edge-1 speaks for edge-2.
	publishOn(t, js, subj("edge-1", receipt.StatusProcessed), receipt.New("both", "L1A", "edge-2", "edge-1", receipt.StatusProcessed, time.Now()))
	// edge-2 dead-letters an event that was never routed to it.
	dead := receipt.New("one", "L1A", "edge-2", "edge-2", receipt.StatusDeadLettered, time.Now())
	dead.Reason = "forged"
	publishOn(t, js, subj("edge-2", receipt.StatusDeadLettered), dead)
	want := map[string]uint64{completion.RefusedSubjectMismatch: 1, completion.RefusedProcessorNotSite: 1, completion.RefusedNotExpected: 1}
	check.For(t, 20*time.Second, 10*time.Millisecond, func() error {
		got := svc.Refusals()
		for reason, n := range want {
			if got[reason] != n {
				return fmt.Errorf("refusals %v, want %v", got, want)
			}
		}
		return nil
	})
	for _, reason := range []string{completion.RefusedSubjectMismatch, completion.RefusedProcessorNotSite, completion.RefusedNotExpected} {
		if !strings.Contains(logs.String(), "refusal="+reason) {
			t.Errorf("no log line for refusal %s", reason)
		}
	}
	reasons := quarantineReasons(t, js)
	if len(reasons) != 3 || !strings.Contains(strings.Join(reasons, "\n"), `subject "leafline.receipts.edge-1.processed"`) {
		t.Errorf("quarantine reasons %q", reasons)
	}
	for _, id := range []string{"both", "one"} {
		if c, err := svc.Get(ctx, id); err != nil || c.Status != record.EventPending || len(c.Processors) != 0 {
			t.Fatalf("%s after the refused receipts: %+v %v", id, c, err)
		}
	}

	// The genuine receipts still count.
	publishOn(t, js, subj("edge-1", receipt.StatusProcessed), receipt.New("both", "L1A", "edge-1", "edge-1", receipt.StatusProcessed, time.Now()))
	publishOn(t, js, subj("edge-2", receipt.StatusProcessed), receipt.New("both", "L1A", "edge-2", "edge-2", receipt.StatusProcessed, time.Now()))
	publishOn(t, js, subj("edge-1", receipt.StatusProcessed), receipt.New("one", "L1A", "edge-1", "edge-1", receipt.StatusProcessed, time.Now()))
	completiontest.WaitStatus(t, svc, "both", record.EventComplete)
	completiontest.WaitStatus(t, svc, "one", record.EventComplete)

	// Receipts for events L1 has not seen are held and count for nothing.
	publishOn(t, js, subj("edge-1", receipt.StatusProcessed), receipt.New("early", "L1A", "edge-1", "edge-1", receipt.StatusProcessed, time.Now()))
	stray := receipt.New("stray", "L1A", "edge-2", "edge-2", receipt.StatusDeadLettered, time.Now())
	stray.Reason = "forged"
	publishOn(t, js, subj("edge-2", receipt.StatusDeadLettered), stray)
	for _, id := range []string{"early", "stray"} {
		c := completiontest.WaitStatus(t, svc, id, record.EventOriginUnknown)
		if len(c.Processors) != 0 || len(c.Held) != 1 {
			t.Fatalf("%s: %+v", id, c)
		}
	}
	check.For(t, 10*time.Second, 10*time.Millisecond, func() error { // counted after the record is written
		if st := svc.Stats(); st.Held != 2 || st.Applied != 3 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if got := completiontest.ListAll(t, svc, record.ListQuery{Status: record.ListPending}); !slices.Equal(got, []string{"early", "stray"}) {
		t.Fatalf("pending (origin_unknown included): %q", got)
	}

	// The origin releases what the event was routed to, and only that.
	completiontest.PublishEvent(t, js, "events.b", "early")
	completiontest.PublishEvent(t, js, "events.b", "stray") // routed to edge-1 only
	completiontest.WaitStatus(t, svc, "early", record.EventComplete)
	c := completiontest.WaitStatus(t, svc, "stray", record.EventPending)
	if _, ok := c.Unexpected["edge-2"]; !ok || len(c.Processors) != 0 || len(c.Held) != 0 || !slices.Equal(c.Missing, []string{"edge-1"}) {
		t.Fatalf("stray after its origin: %+v", c)
	}
	check.For(t, 10*time.Second, 10*time.Millisecond, func() error { // counted, then logged, after the record is written
		if st := svc.Stats(); st.HeldReleased != 1 || st.HeldRefused != 1 || st.Applied != 4 {
			return fmt.Errorf("stats %+v", st)
		}
		if !strings.Contains(logs.String(), "held receipts refused") {
			return errors.New("no log line for the refused held receipt")
		}
		return nil
	})
	publishOn(t, js, subj("edge-1", receipt.StatusProcessed), receipt.New("stray", "L1A", "edge-1", "edge-1", receipt.StatusProcessed, time.Now()))
	completiontest.WaitStatus(t, svc, "stray", record.EventComplete)
}

func TestRefusalReason(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", completion.ErrSubjectMismatch), completion.RefusedSubjectMismatch},
		{fmt.Errorf("x: %w", completion.ErrProcessorNotSite), completion.RefusedProcessorNotSite},
		{fmt.Errorf("x: %w", record.ErrNotExpected), completion.RefusedNotExpected},
		{fmt.Errorf("%w: %w", completion.ErrRejected, receipt.ErrBadSignature), completion.RefusedBadSignature},
		{fmt.Errorf("%w: %w", receipt.ErrMalformed, receipt.ErrInvalid), completion.RefusedMalformed},
		{receipt.ErrInvalid, completion.RefusedInvalid},
		{record.ErrCorruptRecord, completion.RefusedCorruptRecord},
		{fmt.Errorf("%w: unknown site", completion.ErrRejected), completion.RefusedRejected},
	} {
		if got := completion.RefusalReason(tt.err); got != tt.want {
			t.Errorf("RefusalReason(%v) = %s, want %s", tt.err, got, tt.want)
		}
		if !errors.Is(tt.err, receipt.ErrQuarantine) {
			t.Errorf("%v does not match ErrQuarantine", tt.err)
		}
	}
	if len(completion.RefusalReasons) != completion.RefusalCounters {
		t.Fatalf("%d reasons, %d counters", len(completion.RefusalReasons), completion.RefusalCounters)
	}
}

// TestService_HeldExpires: a receipt held for an event whose origin does
// not arrive within HoldFor is quarantined (refusal origin_unknown),
// counted and logged, and its record is removed without a trace in the
// summary; the event, published later, is tracked afresh.
func TestService_HeldExpires(t *testing.T) {
	logs := &logxtest.Buffer{}
	svc, js := completiontest.StartTracking(t, func(c *completion.ServiceConfig) {
		c.HoldFor = 300 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	ctx := jstest.Ctx(t)
	publishOn(t, js, "leafline.receipts.edge-1.processed", receipt.New("ghost", "L1A", "edge-1", "edge-1", receipt.StatusProcessed, time.Now()))
	completiontest.WaitStatus(t, svc, "ghost", record.EventOriginUnknown)
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if _, err := svc.Get(ctx, "ghost"); !errors.Is(err, record.ErrNotFound) {
			return fmt.Errorf("ghost still there: %v", err)
		}
		if got := svc.Refusals()[completion.RefusedOriginUnknown]; got != 1 {
			return fmt.Errorf("refusals %v", svc.Refusals())
		}
		return nil
	})
	if st := svc.Stats(); st.HeldExpired != 1 || st.Quarantined != 1 {
		t.Fatalf("stats %+v", st)
	}
	if r := quarantineReasons(t, js); len(r) != 1 || !strings.HasPrefix(r[0], "origin_unknown: event \"ghost\"") {
		t.Fatalf("quarantine reasons %q", r)
	}
	if !strings.Contains(logs.String(), "refusal=origin_unknown") {
		t.Error("no log line for the expired receipt")
	}
	sum, err := svc.Summary(ctx)
	if err != nil || sum.Events != 0 || sum.Pending != 0 {
		t.Fatalf("summary %+v %v", sum, err)
	}
	completiontest.PublishEvent(t, js, "events.b", "ghost")
	completiontest.WaitStatus(t, svc, "ghost", record.EventPending)
	publishOn(t, js, "leafline.receipts.edge-1.processed", receipt.New("ghost", "L1A", "edge-1", "edge-1", receipt.StatusProcessed, time.Now()))
	completiontest.WaitStatus(t, svc, "ghost", record.EventComplete)
}
