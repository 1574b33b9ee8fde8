package completion_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

// publishBundle publishes recs as one bundle on subject.
func publishBundle(t *testing.T, js jetstream.JetStream, subject, id string, recs ...[]byte) {
	t.Helper()
	body := bytes.Join(recs, []byte{'\n'})
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(receipt.BundleHeader, strconv.Itoa(len(recs)))
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := js.PublishMsg(jstest.Ctx(t), m); err != nil {
		t.Fatalf("publish bundle: %v", err)
	}
}

// TestService_Bundles: the receipts of a bundle are applied as single
// receipts are, each counted; a receipt of it that cannot be read is
// quarantined alone (its place in the bundle recorded) and the rest are
// applied; a bundle that does not speak for one site, the site of its
// subject, is quarantined whole; a bundle delivered again counts its
// receipts as duplicates. Every message is ACKed once.
func TestService_Bundles(t *testing.T) {
	for _, applyBatch := range []int{1, 128} {
		t.Run(fmt.Sprintf("ApplyBatch=%d", applyBatch), func(t *testing.T) {
			_, js := jstest.StartJS(t, jstest.Options{})
			ctx := jstest.Ctx(t)
			completiontest.CreateR1(t, js)
			cfg := completiontest.Config(js)
			cfg.ApplyBatch = applyBatch
			cfg.SubjectPrefix = "leafline.receipts"
			svc, err := completion.NewService(cfg)
			if err != nil {
				t.Fatal(err)
			}
			completiontest.Run(t, svc)
			const site = "leafline.receipts.edge-1.bundle"
			var ten [][]byte
			for i := range 10 {
				ten = append(ten, receipttest.Encode(t, receipttest.Receipt(receipttest.EventID(i))))
			}
			publishBundle(t, js, site, "b-ten", ten...)
			publishBundle(t, js, site, "b-bad", receipttest.Encode(t, receipttest.Receipt("evt-b1")), receipttest.Encode(t, receipttest.Receipt("evt-b2")), []byte(`{"v":1,`))
			two := receipttest.Receipt("evt-two-sites")
			two.Site, two.Processor = "edge-2", "edge-2"
			publishBundle(t, js, site, "b-sites", receipttest.Encode(t, receipttest.Receipt("evt-s1")), receipttest.Encode(t, two))
			publishBundle(t, js, "leafline.receipts.edge-2.bundle", "b-subject", receipttest.Encode(t, receipttest.Receipt("evt-x1")), receipttest.Encode(t, receipttest.Receipt("evt-x2")))
			publishBundle(t, js, site, "b-ten-again", ten...)
			want := record.Stats{Received: 10 + 3 + 2 + 2 + 10, Applied: 12, Duplicates: 10, Quarantined: 3}
			check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
				if err := completiontest.StatsEqual(svc, want); err != nil {
					return err
				}
				return completiontest.ConsumerDrained(ctx, js, "R1", completion.DefaultConsumer)
			})
			for _, id := range []string{"evt-s1", "evt-two-sites", "evt-x1", "evt-x2"} {
				if _, err := svc.Get(ctx, id); !errors.Is(err, record.ErrNotFound) {
					t.Errorf("%s: Get = %v, want ErrNotFound (its bundle was refused whole)", id, err)
				}
			}
			for _, id := range []string{receipttest.EventID(0), receipttest.EventID(9), "evt-b1", "evt-b2"} {
				c, err := svc.Get(ctx, id)
				if err != nil || c.Processors["edge-1"].Status != receipt.StatusProcessed || c.Processors["edge-1"].Duplicates != boolInt(id == receipttest.EventID(0) || id == receipttest.EventID(9)) {
					t.Errorf("%s: Get = %+v, %v", id, c, err)
				}
			}
			// Lanes apply bundles in parallel: the records come in any order.
			whole, alone := 0, 0
			for _, r := range quarantineRecords(t, js) {
				switch {
				case r.Of == 3 && r.Index == 2 && string(r.Receipt) == `{"v":1,` && strings.Contains(r.Reason, "malformed"):
					alone++
				case r.Of == 0 && r.Index == 0 && r.Size == len(r.Receipt) && r.Size > 0:
					whole++
				default:
					t.Errorf("quarantine record %+v", r)
				}
			}
			if alone != 1 || whole != 2 {
				t.Errorf("quarantined %d receipts alone and %d bundles whole, want 1 and 2", alone, whole)
			}
			if got := svc.Refusals()[completion.RefusedSubjectMismatch]; got != 2 {
				t.Errorf("subject_mismatch refusals %d, want 2", got)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// quarantineRecords returns the quarantine records in stream order.
func quarantineRecords(t *testing.T, js jetstream.JetStream) []completion.QuarantineRecord {
	t.Helper()
	ctx := jstest.Ctx(t)
	s, err := js.Stream(ctx, completion.DefaultQuarantineStream)
	if err != nil {
		t.Fatal(err)
	}
	var out []completion.QuarantineRecord
	st := s.CachedInfo().State
	for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var rec completion.QuarantineRecord
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// TestService_ClassLanes: receipts in a class lane (receipt.ClassSubject)
// are applied by the lane's own consumer, once: the other consumer ACKs
// them without applying them. A lane the service has no consumer for is
// applied by the other one, and the subject still binds a receipt to its
// site and status in either.
func TestService_ClassLanes(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	completiontest.CreateR1(t, js)
	cfg := completiontest.Config(js)
	cfg.SubjectPrefix = "leafline.receipts"
	cfg.Classes = []string{"urgent"}
	svc, err := completion.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := completiontest.Run(t, svc)
	publishBundle(t, js, "leafline.receipts.edge-1.bundle.urgent", "b-urgent",
		receipttest.Encode(t, receipttest.Receipt("evt-u1")), receipttest.Encode(t, receipttest.Receipt("evt-u2")))
	publishOn(t, js, "leafline.receipts.edge-1.processed.urgent", receipttest.Receipt("evt-u3"))
	publishOn(t, js, "leafline.receipts.edge-1.processed", receipttest.Receipt("evt-n1"))
	publishOn(t, js, "leafline.receipts.edge-1.processed.other", receipttest.Receipt("evt-o1"))
	publishOn(t, js, "leafline.receipts.edge-2.processed.urgent", receipttest.Receipt("evt-bad1")) // another site's
	publishOn(t, js, "leafline.receipts.edge-1.processed.Urgent", receipttest.Receipt("evt-bad2")) // no class token
	want := record.Stats{Received: 7, Applied: 5, Quarantined: 2}
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if err := completiontest.StatsEqual(svc, want); err != nil {
			return err
		}
		for _, c := range []string{completion.DefaultConsumer, completion.DefaultConsumer + "-urgent"} {
			if err := completiontest.ConsumerDrained(ctx, js, "R1", c); err != nil {
				return err
			}
		}
		return nil
	})
	lane, err := js.Consumer(ctx, "R1", completion.DefaultConsumer+"-urgent")
	if err != nil {
		t.Fatal(err)
	}
	if f := lane.CachedInfo().Config.FilterSubject; f != "leafline.receipts.*.*.urgent" {
		t.Errorf("the lane's consumer takes %q", f)
	}
	if info, _ := lane.Info(ctx); info.Delivered.Stream == 0 || info.NumAckPending != 0 {
		t.Errorf("the lane's consumer delivered %+v", info.Delivered)
	}
	if got := svc.Refusals()[completion.RefusedSubjectMismatch]; got != 2 {
		t.Errorf("subject_mismatch refusals %d, want 2", got)
	}

	// The class is no longer configured: a receipt of its lane that the
	// other consumer had left to it is still applied, by its lane.
	stop()
	publishOn(t, js, "leafline.receipts.edge-1.processed.urgent", receipttest.Receipt("evt-u4"))
	normal, err := js.Consumer(ctx, "R1", completion.DefaultConsumer)
	if err != nil {
		t.Fatal(err)
	}
	b, err := normal.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		if err := m.DoubleAck(ctx); err != nil { // as the consumer skipping it did
			t.Fatal(err)
		}
	}
	cfg.Classes = nil
	again, err := completion.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	completiontest.Run(t, again)
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if c, err := again.Get(ctx, "evt-u4"); err != nil || c.Processors["edge-1"].Status != receipt.StatusProcessed {
			return fmt.Errorf("evt-u4: %+v, %v", c, err)
		}
		return nil
	})

	for _, c := range []completion.ServiceConfig{
		{JS: js, Stream: "R1", Classes: []string{"urgent"}},
		{JS: js, Stream: "R1", SubjectPrefix: "r", Classes: []string{"urgent", "urgent"}},
		{JS: js, Stream: "R1", SubjectPrefix: "r", Classes: []string{"bundle"}},
	} {
		if _, err := completion.NewService(c); err == nil || !strings.Contains(err.Error(), "Classes") {
			t.Errorf("classes %q with prefix %q: %v", c.Classes, c.SubjectPrefix, err)
		}
	}
}
