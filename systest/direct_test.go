package systest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/box"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/internal/localsys"
	"github.com/leafline/leafline/internal/logx/logxtest"
	"github.com/leafline/leafline/jsplan"
	"github.com/leafline/leafline/l1"
	"github.com/leafline/leafline/topology"
)

// directSystem lays out a System (secured, unless o.Insecure: mutual
// TLS, nkeys, link permissions) in which the edges named in filters
// consume L1A directly, each with its filter ("" keeps the default), and
// starts the sites in start (all of them when nil).
func directSystem(t *testing.T, o Options, filters map[string]string, start []string) *System {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	// The links other than the direct consumers' use sourcing here.
	configure := o.Configure
	o.Configure = func(c *topology.Config) {
		c.Topology.Transport = topology.TransportSourcing
		if configure != nil {
			configure(c)
		}
	}
	ls, err := newLocal(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	for name, filter := range filters {
		s, ok := ls.Topology.Site(name)
		if !ok {
			t.Fatalf("no site %s", name)
		}
		s.DeliveryMode = topology.DeliveryDirect
		if filter != "" {
			s.Filter = filter
		}
	}
	if err := ls.Topology.Validate(); err != nil {
		t.Fatal(err)
	}
	if start == nil {
		for _, s := range ls.Topology.Sites {
			start = append(start, s.Name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range start {
		if _, err := ls.Start(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpSystem(t, ls)
		}
	})
	check.For(t, 30*time.Second, 50*time.Millisecond, func() error {
		for _, name := range start {
			if a := ls.App(name); a.Site().Upstream != "" && !a.UpstreamConnected() {
				return fmt.Errorf("%s not connected upstream", name)
			}
		}
		return nil
	})
	return ls
}

// dumpSystem logs where the events and receipts are, for a failed test.
func dumpSystem(t *testing.T, ls *System) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range ls.Topology.Sites {
		a := ls.App(s.Name)
		if a == nil {
			continue
		}
		nc, err := nats.Connect(a.ClientURL())
		if err != nil {
			continue
		}
		js, _ := jetstream.New(nc)
		for _, sc := range jsplan.SitePlan(ls.Configs[s.Name], &s).Streams {
			t.Logf("%s %s: %d messages", s.Name, sc.Name, localsys.StreamState(ctx, js, sc.Name).Msgs)
		}
		if st, ok := directStatus(a); ok {
			t.Logf("%s direct: %+v", s.Name, st)
		}
		if s.Role == topology.RoleEdge {
			t.Logf("%s fetched %v acked %v", s.Name, metricOf(t, a, "leafline_messages_fetched_total", nil), metricOf(t, a, "leafline_messages_acked_total", nil))
		}
		if svc := leafline.Completions(a); svc != nil {
			t.Logf("%s completions: %+v", s.Name, svc.Stats())
		}
		nc.Close()
	}
}

// publishOn publishes n events on subject with ids "<prefix>.<i>".
func publishOn(t *testing.T, js jetstream.JetStream, subject, prefix string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s.%d", prefix, i)
		m := nats.NewMsg(subject)
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Data = []byte(`{"k":1}`)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestDirect_EndToEnd: with the links secured, a direct-mode edge consumes
// L1A on L1 through the hub, its receipts complete at L1, and every
// original delivery on L1 is ACKed; a sourced edge beside it is unchanged.
// The direct edge has no L2A and the hub serves no source on HA for it.
// Its ACKs are confirmed (DoubleAck): the server's answers cross the links
// back to the edge.
func TestDirect_EndToEnd(t *testing.T) {
	ls := directSystem(t, Options{Edges: 2, Configure: func(c *topology.Config) {
		c.Delivery.AckConfirmation.Enabled = true
		c.Delivery.AckConfirmation.TimeoutMS = 5000
	}}, map[string]string{"edge1": ""}, nil)
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, l1js, "direct", 300)
	waitCompleted(t, ls, ids, "edge1", "edge2")

	name := topology.DirectConsumerName("edge1")
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		info := jstest.ConsumerInfo(t, l1js, "L1A", name)
		if info.NumAckPending != 0 || info.NumPending != 0 || info.AckFloor.Stream < 300 {
			return fmt.Errorf("ack pending %d, pending %d, ack floor %d", info.NumAckPending, info.NumPending, info.AckFloor.Stream)
		}
		return nil
	})
	info := jstest.ConsumerInfo(t, l1js, "L1A", name)
	if c := info.Config; c.AckPolicy != jetstream.AckExplicitPolicy || !slices.Equal(c.FilterSubjects, []string{"events.>", "leafline.to.edge1.>"}) || c.DeliverSubject != "" {
		t.Fatalf("consumer config: %+v", c)
	}
	ctx := context.Background()
	if _, err := jstest.ConnectURL(t, ls.App("edge1").ClientURL()).Stream(ctx, "L2A"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("edge1 has an L2A: %v", err)
	}
	hubjs := jstest.ConnectURL(t, ls.App("hub").ClientURL())
	if _, err := hubjs.PushConsumer(ctx, "HA", topology.SourceConsumerName("edge1")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the hub serves a source on HA for edge1: %v", err)
	}
	if _, err := hubjs.PushConsumer(ctx, "HA", topology.SourceConsumerName("edge2")); err != nil {
		t.Fatalf("edge2's source: %v", err)
	}
	m := ls.App("edge1")
	if ok, timeouts := metricOf(t, m, "leafline_ack_confirmation_successes_total", nil), metricOf(t, m, "leafline_ack_confirmation_timeouts_total", nil); ok != 300 || timeouts != 0 {
		t.Fatalf("confirmed ACKs: %v, timeouts %v", ok, timeouts)
	}
	st, ok := directStatus(ls.App("edge1"))
	if !ok || !st.Reachable || st.Consumer != name || st.Domain != "l1" {
		t.Fatalf("edge1 direct status %+v, %v", st, ok)
	}
	if _, ok := directStatus(ls.App("edge2")); ok {
		t.Fatal("edge2 (sourced) reports a direct status")
	}
}

// TestDirect_UpstreamDown: with its link or the hub's link to L1 cut, a
// direct-mode edge processes nothing (it has no copy of the events), logs
// the outage once rather than per fetch, does not spin, and resumes by
// itself when the link returns; nothing is lost or applied twice.
func TestDirect_UpstreamDown(t *testing.T) {
	logs := &logxtest.Buffer{}
	ls := directSystem(t, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))},
		map[string]string{"edge1": ""}, nil)
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	edge := ls.App("edge1")
	ejs := jstest.ConnectURL(t, edge.ClientURL())
	ctx := context.Background()
	all := publishN(t, l1js, "before", 50)
	waitCompleted(t, ls, all, "edge1")

	const down = "cannot reach the origin stream on L1"
	const up = "reachable again"
	for i, link := range []string{"edge1", "hub"} {
		t.Logf("cutting the %s → upstream link", link)
		ls.Links[link].Cut()
		check.For(t, 15*time.Second, 50*time.Millisecond, func() error {
			if st, _ := directStatus(edge); st.Reachable {
				return errors.New("edge1 still reaches L1")
			}
			return nil
		})
		st0, _ := directStatus(edge)
		held := localsys.StreamState(ctx, ejs, "RE").LastSeq
		during := publishN(t, l1js, fmt.Sprintf("during-%s", link), 100)
		all = append(all, during...)
		time.Sleep(4 * time.Second) // the outage under observation
		st, _ := directStatus(edge)
		if n := localsys.StreamState(ctx, ejs, "RE").LastSeq; n != held {
			t.Fatalf("RE stored %d new receipts with L1 unreachable", n-held)
		}
		if st.Reachable || !strings.Contains(st.LastError, "unreachable") {
			t.Fatalf("status during the outage: %+v", st)
		}
		// /readyz says so, and the box stays ready (its relay still works).
		var rd box.Readiness
		if code, err := getJSON("http://"+edge.OpsAddr()+"/readyz", &rd); err != nil || code != 200 || rd.Direct == nil || rd.Direct.Reachable {
			t.Fatalf("/readyz during the outage: %d %v %+v", code, err, rd)
		}
		// At most one attempt per directRetryPause (1s): not a spin.
		if n := st.FailedFetches - st0.FailedFetches; n < 1 || n > 8 {
			t.Fatalf("%d failed fetches in 4s", n)
		}
		// Logged per outage, not per fetch.
		if n := len(logs.Lines("edge1", down)); n < i+1 || n > 2*(i+1) {
			t.Fatalf("%d %q lines after %d outages:\n%s", n, down, i+1, strings.Join(logs.Lines("edge1", ""), "\n"))
		}
		if n := len(logs.Lines("edge1", "fetch failed")); n != 0 {
			t.Fatalf("the runner logged %d fetch failures", n)
		}
		ls.Links[link].Restore()
		waitCompleted(t, ls, all, "edge1")
		if n := len(logs.Lines("edge1", up)); n < i+1 {
			t.Fatalf("%d %q lines after %d outages", n, up, i+1)
		}
	}
}

// TestDirect_StartWhileUnreachable: a direct-mode edge that starts while L1
// cannot be reached starts anyway (after directStartWait), binds to the
// consumer L1 created when the link comes up, and processes.
func TestDirect_StartWhileUnreachable(t *testing.T) {
	ls := directSystem(t, Options{}, map[string]string{"edge1": ""}, []string{"l1", "hub"})
	ls.Links["edge1"].Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	edge, err := ls.Start(ctx, "edge1")
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := directStatus(edge); st.Reachable {
		t.Fatalf("reachable through a cut link: %+v", st)
	}
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, l1js, "late", 20)
	ls.Links["edge1"].Restore()
	waitCompleted(t, ls, ids, "edge1")
}

// TestDirect_IncompatibleConsumer: a consumer on L1A under the edge's name
// that direct mode cannot use (put there by a client of L1's account in
// place of the one L1 created) stops the edge's start with
// jsplan.ErrIncompatible, and is left as it was.
func TestDirect_IncompatibleConsumer(t *testing.T) {
	ls := directSystem(t, Options{}, map[string]string{"edge1": ""}, []string{"l1", "hub"})
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := topology.DirectConsumerName("edge1")
	// L1 may create its own again between the two calls: retry.
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if err := l1js.DeleteConsumer(ctx, "L1A", name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
		_, err := l1js.CreateConsumer(ctx, "L1A", jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckNonePolicy})
		return err
	})
	_, err := ls.Start(ctx, "edge1")
	if !errors.Is(err, jsplan.ErrIncompatible) || !strings.Contains(err.Error(), "ack policy") {
		t.Fatalf("start: %v", err)
	}
	if info := jstest.ConsumerInfo(t, l1js, "L1A", name); info.Config.AckPolicy != jetstream.AckNonePolicy {
		t.Fatalf("the consumer was changed: %+v", info.Config)
	}
}

// TestDirect_Security: with every link secured, a direct-mode edge reaches
// its own consumer on L1 and nothing else: not another edge's consumer
// (info, pull, create, delete, ACK, deliveries), not its own consumer's
// creation (with any filter) or deletion, not L1's streams; and replies reach it
// only under its own inbox prefix. The insecure control shows that the
// same attempts otherwise succeed.
func TestDirect_Security(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		t.Run(fmt.Sprintf("insecure=%v", insecure), func(t *testing.T) { directSecurity(t, insecure) })
	}
}

func directSecurity(t *testing.T, insecure bool) {
	ls := directSystem(t, Options{Edges: 2, Insecure: insecure},
		map[string]string{"edge1": "events.edge1.>", "edge2": "events.edge2.>"}, []string{"l1", "hub", "edge1"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l1nc, err := nats.Connect(ls.App("l1").ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l1nc.Close)
	l1js, _ := jetstream.New(l1nc)
	ids := publishOn(t, l1js, "events.edge1.a", "e1", 10)
	publishOn(t, l1js, "events.edge2.a", "e2", 10)
	waitCompleted(t, ls, ids, "edge1")

	// edge2 (not running) has its consumer on L1 with two deliveries
	// pending, fetched at L1: their reply subjects are real ACK subjects
	// of edge2's consumer.
	e1name, e2name := topology.DirectConsumerName("edge1"), topology.DirectConsumerName("edge2")
	e2site, _ := ls.Topology.Site("edge2")
	e2cons, err := l1js.CreateOrUpdateConsumer(ctx, "L1A", jsplan.DirectConsumer(ls.Topology, e2site))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := e2cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var pending []jetstream.Msg
	for m := range batch.Messages() {
		pending = append(pending, m)
	}
	if len(pending) != 2 {
		t.Fatalf("fetched %d of edge2's events", len(pending))
	}

	edgeConn := func(opts ...nats.Option) *nats.Conn {
		nc, err := nats.Connect(ls.App("edge1").ClientURL(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	mine := edgeConn(nats.CustomInboxPrefix(topology.DirectInboxPrefix("edge1")))
	// edge1 reaches its own consumer.
	if err := jsAPI(mine, "$JS.l1.API.CONSUMER.INFO.L1A."+e1name, nil); err != nil {
		t.Fatalf("edge1's own consumer info: %v", err)
	}
	// edge1 listens on edge2's inbox space, and ACKs and terminates
	// edge2's pending deliveries.
	stolen, err := mine.SubscribeSync(topology.DirectInboxPrefix("edge2") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	own, err := mine.SubscribeSync(topology.DirectInboxPrefix("edge1") + ".probe")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range pending {
		for _, verb := range []string{"+ACK", "+TERM"} {
			if err := mine.Publish(m.Reply(), []byte(verb)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := mine.Flush(); err != nil {
		t.Fatal(err)
	}
	// Once a probe from L1 reaches edge1's inbox space, its subscriptions
	// have crossed the links.
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if err := l1nc.Publish(topology.DirectInboxPrefix("edge1")+".probe", []byte("x")); err != nil {
			return err
		}
		_, err := own.NextMsg(200 * time.Millisecond)
		return err
	})
	if err := l1nc.Publish(topology.DirectInboxPrefix("edge2")+".x", []byte("secret")); err != nil {
		t.Fatal(err)
	}
	if insecure {
		// The control: without the link permissions every attempt works.
		if err := jsAPI(mine, "$JS.l1.API.CONSUMER.INFO.L1A."+e2name, nil); err != nil {
			t.Fatalf("control: edge2's consumer info: %v", err)
		}
		if _, err := stolen.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("control: edge1 did not receive from edge2's inbox space: %v", err)
		}
		check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
			if n := jstest.ConsumerInfo(t, l1js, "L1A", e2name).NumAckPending; n != 0 {
				return fmt.Errorf("control: edge2's consumer has %d pending ACKs after edge1 ACKed them", n)
			}
			return nil
		})
		return
	}
	// Replies under any other inbox prefix do not come back.
	if err := jsAPI(edgeConn(), "$JS.l1.API.CONSUMER.INFO.L1A."+e1name, nil); !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a reply reached edge1 outside its inbox prefix: %v", err)
	}
	wide := map[string]any{"stream_name": "L1A", "config": map[string]any{
		"durable_name": e1name, "ack_policy": "explicit", "deliver_policy": "all", "filter_subject": "events.>"}}
	for _, r := range []struct {
		subject string
		body    any
	}{
		{"$JS.l1.API.CONSUMER.INFO.L1A." + e2name, nil},
		{"$JS.l1.API.CONSUMER.MSG.NEXT.L1A." + e2name, map[string]any{"batch": 1, "expires": int64(time.Second)}},
		{"$JS.l1.API.CONSUMER.CREATE.L1A." + e2name + ".events.edge2.>", nil},
		{"$JS.l1.API.CONSUMER.DELETE.L1A." + e2name, nil},
		{"$JS.l1.API.CONSUMER.DELETE.L1A." + e1name, nil},
		{"$JS.l1.API.CONSUMER.CREATE.L1A." + e1name + ".events.>", wide},
		{"$JS.l1.API.CONSUMER.CREATE.L1A." + e1name + ".events.edge1.>", nil},
		{"$JS.l1.API.CONSUMER.CREATE.L1A." + e1name, wide},
		{"$JS.l1.API.CONSUMER.CREATE.L1A.leafline-intruder", nil},
		{"$JS.l1.API.STREAM.INFO.L1A", nil},
		{"$JS.l1.API.STREAM.DELETE.L1A", nil},
	} {
		err := jsAPI(mine, r.subject, r.body)
		if err == nil {
			t.Fatalf("%s answered across edge1's link", r.subject)
		}
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("%s: %v (want no responders or a timeout: the request must not reach L1)", r.subject, err)
		}
	}
	// A full round trip through edge1 after the attempts: anything they
	// could have reached, they have reached by now.
	more := publishOn(t, l1js, "events.edge1.b", "e1b", 5)
	waitCompleted(t, ls, append(ids, more...), "edge1")
	if m, err := stolen.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("edge1 received %q from edge2's inbox space", m.Subject)
	}
	if info := jstest.ConsumerInfo(t, l1js, "L1A", e2name); info.NumAckPending != 2 {
		t.Fatalf("edge2's consumer: %d pending ACKs, want 2 (edge1's ACKs must not reach it)", info.NumAckPending)
	}
	if c := jstest.ConsumerInfo(t, l1js, "L1A", e1name).Config; c.FilterSubject != "" || !slices.Equal(c.FilterSubjects, []string{"events.edge1.>", "leafline.to.edge1.>"}) {
		t.Fatalf("edge1 widened its consumer to %q%v", c.FilterSubject, c.FilterSubjects)
	}
	if _, err := l1js.Consumer(ctx, "L1A", "leafline-intruder"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("edge1 created a consumer on L1A: %v", err)
	}
	// The same ACK, sent at L1, is a real one.
	if err := pending[0].Ack(); err != nil {
		t.Fatal(err)
	}
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := jstest.ConsumerInfo(t, l1js, "L1A", e2name).NumAckPending; n != 1 {
			return fmt.Errorf("%d pending ACKs after the control ACK", n)
		}
		return nil
	})
}

// TestDirect_Plan: a direct-mode edge owns only its receipts (and DLQ)
// streams, with no consumer of its own in the plan; its hub serves no
// source on HA for it, and still sources its receipts.
func TestDirect_Plan(t *testing.T) {
	ls, err := newLocal(t.TempDir(), Options{Edges: 2, Configure: func(c *topology.Config) {
		c.DeadLetter.Enabled = true
		c.Topology.Transport = topology.TransportSourcing
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	e1, _ := ls.Topology.Site("edge1")
	e1.DeliveryMode = topology.DeliveryDirect
	names := func(p jsplan.Plan) (streams, consumers []string) {
		for _, s := range p.Streams {
			streams = append(streams, s.Name)
		}
		for _, c := range p.Consumers {
			consumers = append(consumers, c.Stream+"/"+c.Config.Durable)
		}
		return streams, consumers
	}
	for _, tc := range []struct{ site, streams, consumers string }{
		{"edge1", "[RE DLQ]", "[RE/leafline-src-hub]"},
		{"edge2", "[L2A RE DLQ]", "[RE/leafline-src-hub L2A/leafline-sink]"},
		{"hub", "[HA RH]", "[HA/leafline-src-edge2 RH/leafline-src-l1]"},
	} {
		s, _ := ls.Topology.Site(tc.site)
		streams, consumers := names(jsplan.SitePlan(ls.Configs[tc.site], s))
		if fmt.Sprint(streams) != tc.streams || fmt.Sprint(consumers) != tc.consumers {
			t.Errorf("%s: streams %v consumers %v, want %s %s", tc.site, streams, consumers, tc.streams, tc.consumers)
		}
	}
	hub, _ := ls.Topology.Site("hub")
	for _, sc := range jsplan.SitePlan(ls.Configs["hub"], hub).Streams {
		if sc.Name == "RH" && len(sc.Sources) != 2 {
			t.Fatalf("RH sources %d edges, want 2", len(sc.Sources))
		}
	}
	e1.DirectConsumer = topology.DirectConsumer{AckWait: topology.Duration(time.Minute), MaxDeliver: 7}
	c := jsplan.DirectConsumer(ls.Topology, e1)
	if c.Durable != "leafline-sink-edge1" || !slices.Equal(c.FilterSubjects, []string{e1.Filter, topology.AddressFilter("edge1")}) || c.AckPolicy != jetstream.AckExplicitPolicy ||
		c.AckWait != time.Minute || c.MaxAckPending != topology.DefaultDirectMaxAckPending || c.MaxDeliver != 7 || c.InactiveThreshold != 0 {
		t.Fatalf("direct consumer config: %+v", c)
	}
}

// TestDirect_L1RepairsItsConsumers: a client of L1's own account (the only
// one that can) reshapes edge1's consumer and deletes edge2's; L1 puts the
// first back in place and creates the second again, reports both, and both
// edges then work.
func TestDirect_L1RepairsItsConsumers(t *testing.T) {
	logs := &logxtest.Buffer{}
	ls := directSystem(t, Options{Edges: 2, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))},
		map[string]string{"edge1": "", "edge2": ""}, []string{"l1"})
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream := ls.Topology.Events.OriginStream
	e1, e2 := topology.DirectConsumerName("edge1"), topology.DirectConsumerName("edge2")
	var cfg jetstream.ConsumerConfig
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		if _, err := l1js.Consumer(ctx, stream, e2); err != nil {
			return err
		}
		c, err := l1js.Consumer(ctx, stream, e1)
		if err != nil {
			return err
		}
		cfg = c.CachedInfo().Config
		return nil
	})
	cfg.InactiveThreshold = time.Hour
	if _, err := l1js.UpdateConsumer(ctx, stream, cfg); err != nil {
		t.Fatal(err)
	}
	if err := l1js.DeleteConsumer(ctx, stream, e2); err != nil {
		t.Fatal(err)
	}
	reg := ls.App("l1").Metrics().Registry()
	check.For(t, 3*l1.DirectGuardEvery, 50*time.Millisecond, func() error {
		for _, e := range []string{"edge1", "edge2"} {
			if got := registryValue(t, reg, "leafline_direct_consumer_altered_total", map[string]string{"edge": e}); got != 1 {
				return fmt.Errorf("leafline_direct_consumer_altered_total{edge=%s} = %v", e, got)
			}
		}
		if len(logs.Lines("l1", "DIRECT CONSUMER ALTERED", "repaired in place", "inactive_threshold", "edge=edge1")) == 0 {
			return errors.New("no log line for edge1's repair")
		}
		if len(logs.Lines("l1", "DIRECT CONSUMER DELETED", "edge=edge2")) == 0 {
			return errors.New("no log line for edge2's consumer created again")
		}
		if th := jstest.ConsumerInfo(t, l1js, stream, e1).Config.InactiveThreshold; th != 0 {
			return fmt.Errorf("inactive threshold still %s", th)
		}
		_, err := l1js.Consumer(ctx, stream, e2)
		return err
	})
	for _, s := range []string{"hub", "edge1", "edge2"} {
		if _, err := ls.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	ids := publishN(t, l1js, "after-repair", 5)
	waitCompleted(t, ls, ids, "edge1", "edge2")
}
