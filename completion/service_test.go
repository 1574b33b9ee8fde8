package completion_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline/completion"
	"github.com/leafline/leafline/completion/completiontest"
	"github.com/leafline/leafline/completion/kvstore"
	"github.com/leafline/leafline/completion/record"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/receipt"
	"github.com/leafline/leafline/receipt/receipttest"
)

func TestService_EndToEnd(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	completiontest.CreateR1(t, js)

	const (
		n          = 500
		dups       = 100 // new receipt for an applied assertion (re-processing, re-sourcing)
		conflicts  = 5   // dead_lettered after processed
		streamDups = 10  // same Nats-Msg-Id: dropped by the stream itself
	)
	var sent []receipt.Receipt
	for i := 0; i < n; i++ {
		r := receipttest.Receipt(receipttest.EventID(i))
		sent = append(sent, r)
		completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID())
	}
	for i := 0; i < streamDups; i++ {
		r := receipttest.Receipt(receipttest.EventID(i))
		if pa := completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID()); !pa.Duplicate {
			t.Fatal("stream did not deduplicate a receipt with the same MsgID")
		}
	}
	for i := 0; i < dups; i++ {
		completiontest.Publish(t, js, receipttest.Encode(t, receipttest.Receipt(receipttest.EventID(i*3))), "")
	}
	for i := 0; i < conflicts; i++ {
		r := receipttest.Receipt(receipttest.EventID(i))
		r.Status, r.Reason = receipt.StatusDeadLettered, "sink: permanent"
		completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID())
	}
	malformed := []string{
		`not json`,
		`{"v":1}`,
		strings.Replace(string(receipttest.Encode(t, receipttest.Receipt("x"))), `"v":1`, `"v":1,"extra":true`, 1),
		string(receipttest.Encode(t, receipttest.Receipt("y"))) + "{}",
		"\xff\xfe",
	}
	for _, m := range malformed {
		completiontest.Publish(t, js, []byte(m), "")
	}

	svc, err := completion.NewService(completiontest.Config(js))
	if err != nil {
		t.Fatal(err)
	}
	if svc.Store() != nil {
		t.Fatal("Store before Setup should be nil")
	}
	completiontest.Run(t, svc)

	want := record.Stats{Received: n + dups + conflicts + uint64(len(malformed)), Applied: n, Duplicates: dups, Conflicts: conflicts, Quarantined: uint64(len(malformed))}
	check.For(t, 30*time.Second, 20*time.Millisecond, func() error { return completiontest.StatsEqual(svc, want) })
	check.For(t, 10*time.Second, 20*time.Millisecond, func() error { return completiontest.ConsumerDrained(ctx, js, "R1", completion.DefaultConsumer) })

	// The completion records.
	all, err := svc.Store().All(ctx)
	if err != nil || len(all) != n {
		t.Fatalf("All: %d records, %v", len(all), err)
	}
	var dupSum, conflictSum int
	for _, c := range all {
		pr := c.Processors["edge-1"]
		dupSum += pr.Duplicates
		conflictSum += pr.Conflicts
		if pr.Status != receipt.StatusProcessed {
			t.Fatalf("%s: status %s, the first status must win", c.EventID, pr.Status)
		}
	}
	if dupSum != dups || conflictSum != conflicts {
		t.Errorf("KV counts duplicates %d conflicts %d, want %d %d", dupSum, conflictSum, dups, conflicts)
	}
	c, err := svc.Store().Get(ctx, sent[7].EventID)
	if err != nil || c.Processors["edge-1"].ReceiptID != sent[7].ReceiptID {
		t.Errorf("Get: %+v, %v; want the first receipt", c, err)
	}

	// The quarantine stream holds one record per malformed message.
	qs, err := js.Stream(ctx, completion.DefaultQuarantineStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := qs.Info(ctx)
	if err != nil || info.State.Msgs != uint64(len(malformed)) {
		t.Fatalf("quarantine stream: %+v, %v", info, err)
	}
	if info.Config.Discard != jetstream.DiscardNew || info.Config.Storage != jetstream.FileStorage {
		t.Errorf("quarantine stream config %+v", info.Config)
	}
	raw, err := qs.GetLastMsgForSubject(ctx, completion.DefaultQuarantineSubject+".receipts")
	if err != nil {
		t.Fatal(err)
	}
	var rec completion.QuarantineRecord
	if err := json.Unmarshal(raw.Data, &rec); err != nil {
		t.Fatal(err)
	}
	// Lanes apply in parallel, so the last record may be any malformed message.
	if rec.Stream != "R1" || rec.Subject != completiontest.ReceiptsSubject || rec.StreamSeq == 0 || rec.ReceivedAt.IsZero() ||
		rec.Reason == "" || rec.Size != len(rec.Receipt) || !slices.Contains(malformed, string(rec.Receipt)) {
		t.Errorf("quarantine record %+v", rec)
	}
	if got, want := raw.Header.Get(jetstream.MsgIDHeader), fmt.Sprintf("rq-R1-%d", rec.StreamSeq); got != want {
		t.Errorf("quarantine Nats-Msg-Id %q, want %q", got, want)
	}

	// The KV bucket as Setup made it.
	kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil || st.History() != 1 {
		t.Errorf("bucket history %v, %v", st, err)
	}
	cons, err := js.Consumer(ctx, "R1", completion.DefaultConsumer)
	if err != nil {
		t.Fatal(err)
	}
	cc := cons.CachedInfo().Config
	if cc.AckPolicy != jetstream.AckExplicitPolicy || cc.AckWait != 30*time.Second || cc.MaxAckPending < 4*completion.DefaultBatchSize {
		t.Errorf("consumer config %+v", cc)
	}
}

// TestService_TwoInstances runs two Services on separate connections sharing
// one consumer and one bucket. Every receipt is sent twice (the second time
// as a fresh receipt without a Nats-Msg-Id), so the instances also race on
// the same events.
func TestService_TwoInstances(t *testing.T) {
	srv, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	completiontest.CreateR1(t, js)

	const n = 1000
	var svcs []*completion.Service
	for i := 0; i < 2; i++ {
		cfg := completiontest.Config(jstest.Connect(t, srv))
		cfg.BatchSize = 64
		svc, err := completion.NewService(cfg)
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, svc)
		completiontest.Run(t, svc)
	}

	for i := 0; i < n; i++ {
		r := receipttest.Receipt(receipttest.EventID(i))
		completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID())
		completiontest.Publish(t, js, receipttest.Encode(t, receipttest.Receipt(receipttest.EventID(i))), "")
	}
	total := func() record.Stats {
		var s record.Stats
		for _, svc := range svcs {
			st := svc.Stats()
			s.Received += st.Received
			s.Applied += st.Applied
			s.Duplicates += st.Duplicates
			s.Conflicts += st.Conflicts
			s.Quarantined += st.Quarantined
		}
		return s
	}
	check.For(t, 60*time.Second, 20*time.Millisecond, func() error {
		if s := total(); s.Applied+s.Duplicates < 2*n {
			return fmt.Errorf("totals %+v", s)
		}
		return completiontest.ConsumerDrained(ctx, js, "R1", completion.DefaultConsumer)
	})
	s := total()
	if s.Applied != n || s.Duplicates < n || s.Conflicts != 0 || s.Quarantined != 0 {
		t.Fatalf("totals %+v, want Applied %d and Duplicates >= %d", s, n, n)
	}
	t.Logf("instance stats: %+v / %+v", svcs[0].Stats(), svcs[1].Stats())
	all, err := svcs[0].Store().All(ctx)
	if err != nil || len(all) != n {
		t.Fatalf("All: %d, %v", len(all), err)
	}
}

func TestService_WaitsForStream(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	svc, err := completion.NewService(completiontest.Config(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Setup(ctx); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Setup without R1 = %v, want ErrStreamNotFound", err)
	}
	completiontest.Run(t, svc)
	completiontest.CreateR1(t, js)
	r := receipttest.Receipt("late")
	completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID())
	check.For(t, 30*time.Second, 20*time.Millisecond, func() error { return completiontest.StatsEqual(svc, record.Stats{Received: 1, Applied: 1}) })
	short, cancel := context.WithTimeout(ctx, 5*time.Second) // Run is certainly running now
	defer cancel()
	if err := svc.Run(short); !errors.Is(err, completion.ErrAlreadyRunning) {
		t.Errorf("second Run = %v, want ErrAlreadyRunning", err)
	}
	// Setup is idempotent once everything exists.
	if err := svc.Setup(ctx); err != nil {
		t.Fatalf("second Setup: %v", err)
	}
}

func TestService_AcceptRejects(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	completiontest.CreateR1(t, js)
	cfg := completiontest.Config(js)
	cfg.Accept = func(r receipt.Receipt) error {
		switch r.Site {
		case "edge-1":
			return nil
		case "panics":
			panic("boom")
		}
		return errors.New("unknown site")
	}
	svc, err := completion.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	completiontest.Run(t, svc)

	good, stranger, panicky := receipttest.Receipt("a"), receipttest.Receipt("b"), receipttest.Receipt("c")
	stranger.Site = "stranger"
	panicky.Site = "panics"
	for _, r := range []receipt.Receipt{good, stranger, panicky} {
		completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID())
	}
	check.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		if st := svc.Stats(); st.Applied != 1 || st.Quarantined != 1 || st.Retried < 2 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if _, err := svc.Store().Get(ctx, "b"); !errors.Is(err, record.ErrNotFound) {
		t.Errorf("rejected receipt was applied: %v", err)
	}
	// The panicking receipt is retried, never ACKed nor quarantined.
	cons, _ := js.Consumer(ctx, "R1", completion.DefaultConsumer)
	info, err := cons.Info(ctx)
	if err != nil || info.NumAckPending != 1 {
		t.Errorf("consumer %+v, %v; want the panicking receipt still pending", info, err)
	}
}

// TestService_QuarantineUnavailable: when the quarantine record cannot be
// stored the bad message is NAKed, not ACKed, and is quarantined once the
// quarantine stream has room again.
func TestService_QuarantineUnavailable(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	completiontest.CreateR1(t, js)
	cfg := completiontest.Config(js)
	cfg.QuarantineMaxBytes = 100 // smaller than any record
	svc, err := completion.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	completiontest.Run(t, svc)
	completiontest.Publish(t, js, []byte("garbage"), "")

	check.For(t, 30*time.Second, 10*time.Millisecond, func() error {
		if st := svc.Stats(); st.Retried < 2 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	cons, _ := js.Consumer(ctx, "R1", completion.DefaultConsumer)
	info, err := cons.Info(ctx)
	if err != nil || info.AckFloor.Stream != 0 || svc.Stats().Quarantined != 0 {
		t.Fatalf("bad message acked without a quarantine record: %+v %v", info, err)
	}

	qs, err := js.Stream(ctx, completion.DefaultQuarantineStream)
	if err != nil {
		t.Fatal(err)
	}
	qcfg := qs.CachedInfo().Config
	qcfg.MaxBytes = 1 << 20
	if _, err := js.UpdateStream(ctx, qcfg); err != nil {
		t.Fatal(err)
	}
	check.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		if st := svc.Stats(); st.Quarantined != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return completiontest.ConsumerDrained(ctx, js, "R1", completion.DefaultConsumer)
	})
}

// TestService_KVUnavailable: Apply errors NAK; the receipt is applied once
// the bucket is back.
func TestService_KVUnavailable(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	ctx := jstest.Ctx(t)
	completiontest.CreateR1(t, js)
	svc, err := completion.NewService(completiontest.Config(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, kvstore.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	completiontest.Run(t, svc)
	r := receipttest.Receipt("evt-1")
	completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID())
	check.For(t, 30*time.Second, 10*time.Millisecond, func() error {
		if st := svc.Stats(); st.Retried < 2 || st.Applied != 0 || st.Quarantined != 0 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	jstest.NewKV(t, js, kvstore.DefaultBucket)
	check.For(t, 30*time.Second, 20*time.Millisecond, func() error {
		if st := svc.Stats(); st.Applied != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return completiontest.ConsumerDrained(ctx, js, "R1", completion.DefaultConsumer)
	})
}

// TestService_ShutdownReleasesBuffered: after Run returns, nothing is left
// acknowledged-but-unapplied and a new instance finishes the work at once
// (queued and buffered messages were NAKed, not left to AckWait).
func TestService_ShutdownReleasesBuffered(t *testing.T) {
	_, js := jstest.StartJS(t, jstest.Options{})
	completiontest.CreateR1(t, js)
	const n, lanes = 300, 4
	// The first message of each lane goes first, so that every lane has one
	// in hand before the dispatcher can block on a full lane.
	order, first := make([]int, 0, n), map[uint64]bool{}
	for i := 0; i < n; i++ {
		if l := completion.LaneHash(receipttest.EventID(i)) % lanes; !first[l] {
			first[l] = true
			order = append(order, i)
		}
	}
	for i := 0; i < n; i++ {
		if !slices.Contains(order, i) {
			order = append(order, i)
		}
	}
	for _, i := range order {
		r := receipttest.Receipt(receipttest.EventID(i))
		completiontest.Publish(t, js, receipttest.Encode(t, r), r.MsgID())
	}
	inAccept, release := make(chan struct{}, n), make(chan struct{})
	cfg := completiontest.Config(js)
	cfg.InFlight = lanes
	cfg.ApplyBatch = 1 // the lanes: one message in hand per lane
	cfg.Accept = func(receipt.Receipt) error {
		inAccept <- struct{}{}
		<-release // hold every lane until shutdown has begun
		return nil
	}
	svc1, err := completion.NewService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc1.Run(ctx) }()
	for i := 0; i < lanes; i++ {
		<-inAccept // every lane has a message in hand, the rest wait in queues and the buffer
	}
	cancel()       // shutdown begins...
	close(release) // ...and the messages in hand still complete
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	st := svc1.Stats()
	if st.Applied != lanes || st.Received != lanes {
		t.Fatalf("first instance %+v; want exactly the %d messages in hand applied", st, lanes)
	}

	// A second instance gets the released messages now, not after AckWait.
	svc2, err := completion.NewService(completiontest.Config(js))
	if err != nil {
		t.Fatal(err)
	}
	completiontest.Run(t, svc2)
	check.For(t, 20*time.Second, 20*time.Millisecond, func() error {
		if a := svc2.Stats().Applied; a != n-lanes {
			return fmt.Errorf("applied %d", a)
		}
		return completiontest.ConsumerDrained(jstest.Ctx(t), js, "R1", completion.DefaultConsumer)
	})
}

func TestNewService_Config(t *testing.T) {
	_, err := completion.NewService(completion.ServiceConfig{
		Stream: "R.1", Consumer: "a b", Bucket: "b*", QuarantineStream: "", QuarantineSubject: "x.>",
		Replicas: 7, BatchSize: -1, OpTimeout: time.Minute,
	})
	if !errors.Is(err, record.ErrInvalidConfig) {
		t.Fatalf("NewService = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"JS: required", "Stream:", "Consumer:", "Bucket:", "QuarantineSubject:", "Replicas:", "BatchSize:", "OpTimeout:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q:\n%v", want, err)
		}
	}
	nc := &nats.Conn{}
	js, _ := jetstream.New(nc)
	if _, err := completion.NewService(completion.ServiceConfig{JS: js, Stream: "R1", QuarantineStream: "R1"}); err == nil {
		t.Error("QuarantineStream == Stream accepted")
	}
	svc, err := completion.NewService(completion.ServiceConfig{JS: js, Stream: "R1"})
	if err != nil {
		t.Fatal(err)
	}
	c := svc.Cfg()
	if c.Consumer != completion.DefaultConsumer || c.Bucket != kvstore.DefaultBucket || c.QuarantineStream != completion.DefaultQuarantineStream ||
		c.Replicas != 1 || c.BatchSize != completion.DefaultBatchSize || c.AckWait != completion.DefaultAckWait || c.Logger == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
}

func TestBackoff(t *testing.T) {
	if completion.Backoff(time.Second, 0) != time.Second || completion.Backoff(time.Second, 3) != 8*time.Second || completion.Backoff(time.Second, 100) != completion.MaxRetryDelay {
		t.Error("backoff")
	}
}
